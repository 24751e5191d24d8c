"""Batch Monte-Carlo: many systems with sampled parameters, one compiled ``vmap``, sharded.

A Monte-Carlo study has four parts:

1. **Distributions** (:class:`Fixed`, :class:`Normal`, :class:`Uniform`, :class:`LogNormal`,
   :class:`TruncatedNormal`): small pytree modules with a ``sample(key, dtype)`` method and a
   known support (used to refuse impossible configurations before anything runs).
2. An :class:`Uncertainty`: *model perturbations* applied in order to the nominal
   :class:`~sdjax.Model` (:class:`Scale` a field by a positive factor, :class:`Offset` a
   geometric field, :class:`InertiaRotation` of principal axes, a :class:`Payload` rigidly
   attached to a link and merged by the parallel-axis rule) and free named *parameters*
   (initial state, controller gains, disturbances) handed to the simulation. Every perturbed
   model is physically valid by construction: masses stay positive, inertia tensors stay
   symmetric, positive definite and satisfy the triangle inequality.
3. A *simulation* ``simulate(model_i, params_i) -> result`` (any pytree, typically a
   :class:`~sdjax.Trajectory`), e.g. the ready :class:`ControlScenario` (``sdjax.rollout``
   under :class:`~sdjax.JointPD` or :class:`~sdjax.ComputedTorque` with sampled gains, a
   constant base force/torque and joint-torque noise).
4. *Metrics* ``{name: f(result, model_i, params_i) -> scalar}`` such as
   :func:`final_attitude_error` and :func:`peak_joint_torque`.

:func:`run_monte_carlo` draws sample ``i`` from ``jax.random.fold_in(jax.random.key(seed), i)``
(then one ``fold_in`` per named item, keyed by a CRC32 of its name), so every sample, and
therefore every result, is independent of the chunk size, of the number of devices and
processes and of which other items are sampled. The batch is cut into chunks of equal size
(the last one padded), each chunk is one call of a single ``jax.jit(jax.vmap(...))``
program whose batch axis is sharded over a 1-D device mesh (``jax.sharding.NamedSharding``,
axis ``"batch"``); with ``jax.distributed`` initialised the mesh spans every process's
devices and each host builds only its own shards. Results come back as
:class:`MonteCarloResults` (per-sample metrics, the sampled draws, ``summary()``,
``save()``/``load()`` in a documented ``.npz`` layout, ``plot()``).

Running on a GPU cluster (one process per host or per GPU, e.g. under SLURM)::

    import jax, sdjax.montecarlo as mc
    jax.distributed.initialize()            # reads SLURM / coordinator env; or pass
    # coordinator_address="host0:1234", num_processes=P, process_id=p explicitly
    res = mc.run_monte_carlo(model, uncertainty, scenario, metrics, num_samples=1_000_000,
                             seed=0, chunk_size=65_536)     # all global GPUs, sharded
    if jax.process_index() == 0:
        res.save("mc.npz")

Every process must run the same script with the same arguments; results are gathered to
every process (``multihost_utils.process_allgather``), so every process holds the full
metric arrays (B floats per metric: tiny compared with the simulation). On CPU-only hosts
JAX's cross-process collectives use gloo (``jax_cpu_collectives_implementation``).
"""

from __future__ import annotations

import collections
import functools
import json
import math
import os
import statistics
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from sdjax.algebra import matmul
from sdjax import batch_kernel
from sdjax._checks import (
    check_callable,
    check_choice,
    check_count,
    check_fraction,
    check_name,
    check_scalar,
    check_type,
    float_array,
    is_integer,
)
from sdjax._derivatives import batched_route
from sdjax.constraints import ConstrainedTrajectory, constrained_rollout
from sdjax.control import ComputedTorque, JointPD
from sdjax.dynamics import Controls
from sdjax.editing import merge_payload
from sdjax.integrate import Trajectory, rollout
from sdjax.model import Model
from sdjax.rotation import quat_conjugate, quat_multiply, rotation_vector_to_matrix
from sdjax.state import State, check_state, make_state, with_base_motion_checked

#: Percentiles reported by :meth:`MonteCarloResults.summary` by default.
DEFAULT_PERCENTILES = (5.0, 50.0, 95.0)

#: Version of the ``.npz`` layout written by :meth:`MonteCarloResults.save`.
FILE_FORMAT = "sdjax.montecarlo/1"

#: Version of the Parquet table written by :meth:`MonteCarloResults.to_parquet`, stored under the
#: schema metadata key :data:`PARQUET_METADATA_KEY`.
PARQUET_FORMAT = "sdjax.montecarlo.parquet/1"
PARQUET_METADATA_KEY = "sdjax.montecarlo"


# ------------------------------------------------------------------------------------------
# Distributions.


def _param(owner: str, name: str, value: Any) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{owner}: {name} must be real numbers ({err})") from None
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{owner}: {name} must be finite, got {arr.tolist()}")
    return arr


def _shape_tuple(owner: str, shape: Any) -> tuple[int, ...]:
    """``shape`` (an integer, a tuple or list of integers, or an integer array; not a ``bool``,
    a float or a string, which ``int()`` would quietly turn into a size) as a tuple of
    non-negative ints."""
    if isinstance(shape, np.ndarray) and shape.dtype.kind in "iu" and shape.ndim <= 1:
        shape = shape.tolist()  # (an integer array, as np.shape(x) of an array gives)
    entries = shape if isinstance(shape, (tuple, list)) else (shape,)
    if not all(is_integer(s) for s in entries):
        raise TypeError(
            f"{owner}: shape: expected an integer or a tuple of integers, got {type(shape).__name__} {shape!r}"
        )
    if any(s < 0 for s in entries):
        raise ValueError(f"{owner}: shape: sizes must be non-negative, got {tuple(int(s) for s in entries)}")
    return tuple(int(s) for s in entries)


def _shape(owner: str, params: dict[str, np.ndarray], shape: Any) -> tuple[int, ...]:
    try:
        common = np.broadcast_shapes(*(p.shape for p in params.values()))
    except ValueError:
        shapes = ", ".join(f"{k} {v.shape}" for k, v in params.items())
        raise ValueError(f"{owner}: parameter shapes do not broadcast together ({shapes})") from None
    if shape is None:
        return tuple(common)
    shape = _shape_tuple(owner, shape)
    try:
        if np.broadcast_shapes(common, shape) != shape:
            raise ValueError
    except ValueError:
        raise ValueError(
            f"{owner}: parameters of shape {tuple(common)} do not broadcast to the requested shape {shape}"
        ) from None
    return shape


class Distribution(eqx.Module):
    """Base class: ``sample(key, dtype) -> (*shape)`` array; ``support() -> (low, high)``."""

    shape: tuple[int, ...] = eqx.field(static=True)

    def sample(self, key: Array, dtype: Any) -> Array:
        raise NotImplementedError

    def support(self) -> tuple[float, float]:
        """Bounds of the support, ``(low, high)`` (``-inf``/``inf`` if unbounded)."""
        raise NotImplementedError

    def is_positive(self) -> bool:
        """True if every draw is ``> 0`` with certainty."""
        return self.support()[0] > 0


class Fixed(Distribution):
    """A constant (no randomness): ``value`` broadcast to ``shape``."""

    value: np.ndarray

    def __init__(self, value: Any, shape: Any = None):
        self.value = _param("Fixed", "value", value)
        self.shape = _shape("Fixed", {"value": self.value}, shape)

    def sample(self, key, dtype):
        return jnp.broadcast_to(jnp.asarray(self.value, dtype), self.shape)

    def support(self):
        return float(np.min(self.value)), float(np.max(self.value))


class Normal(Distribution):
    """Gaussian ``mean + std * N(0, 1)``, elementwise; ``std >= 0``."""

    mean: np.ndarray
    std: np.ndarray

    def __init__(self, mean: Any = 0.0, std: Any = 1.0, shape: Any = None):
        self.mean = _param("Normal", "mean", mean)
        self.std = _param("Normal", "std", std)
        if np.any(self.std < 0):
            raise ValueError(f"Normal: std must be non-negative, got {self.std.tolist()}")
        self.shape = _shape("Normal", {"mean": self.mean, "std": self.std}, shape)

    def sample(self, key, dtype):
        z = jax.random.normal(key, self.shape, dtype)
        return jnp.asarray(self.mean, dtype) + jnp.asarray(self.std, dtype) * z

    def support(self):
        if np.all(self.std == 0):
            return float(np.min(self.mean)), float(np.max(self.mean))
        return -math.inf, math.inf


class Uniform(Distribution):
    """Uniform on ``[low, high)``, elementwise; ``low <= high``."""

    low: np.ndarray
    high: np.ndarray

    def __init__(self, low: Any = 0.0, high: Any = 1.0, shape: Any = None):
        self.low = _param("Uniform", "low", low)
        self.high = _param("Uniform", "high", high)
        self.shape = _shape("Uniform", {"low": self.low, "high": self.high}, shape)
        if np.any(self.low > self.high):
            raise ValueError(
                f"Uniform: low must not exceed high, got low={self.low.tolist()}, high={self.high.tolist()}"
            )

    def sample(self, key, dtype):
        u = jax.random.uniform(key, self.shape, dtype)
        low = jnp.asarray(self.low, dtype)
        return low + (jnp.asarray(self.high, dtype) - low) * u

    def support(self):
        return float(np.min(self.low)), float(np.max(self.high))


class LogNormal(Distribution):
    """``median * exp(sigma * N(0, 1))``: positive; the natural law of a scale factor.

    Arguments:
        median: positive median (e.g. 1.0 for a relative factor).
        sigma: standard deviation of the logarithm (about the relative spread for small sigma).
    """

    median: np.ndarray
    sigma: np.ndarray

    def __init__(self, median: Any = 1.0, sigma: Any = 0.1, shape: Any = None):
        self.median = _param("LogNormal", "median", median)
        self.sigma = _param("LogNormal", "sigma", sigma)
        if np.any(self.median <= 0):
            raise ValueError(f"LogNormal: median must be positive, got {self.median.tolist()}")
        if np.any(self.sigma < 0):
            raise ValueError(f"LogNormal: sigma must be non-negative, got {self.sigma.tolist()}")
        self.shape = _shape("LogNormal", {"median": self.median, "sigma": self.sigma}, shape)

    def sample(self, key, dtype):
        z = jax.random.normal(key, self.shape, dtype)
        return jnp.asarray(self.median, dtype) * jnp.exp(jnp.asarray(self.sigma, dtype) * z)

    def support(self):
        return 0.0 if np.any(self.sigma > 0) else float(np.min(self.median)), math.inf

    def is_positive(self):
        return True  # exp(.) > 0; the infimum 0 is never reached


def _truncated_standard_normal(key: Array, low: Array, high: Array, shape: tuple[int, ...], dtype: Any) -> Array:
    """Draws of ``N(0, 1)`` conditioned on ``low <= z <= high`` (``dtype`` arrays broadcast to
    ``shape``; infinite bounds allowed), exact in the far tails too.

    By inversion in log space: ``log Phi(z) = log Phi(b) + log1p((1 - u) expm1(log Phi(a) -
    log Phi(b)))`` for ``u`` uniform in ``(0, 1)``, on the interval mirrored to the side of
    ``z <= 0`` when most of it lies above 0 (``log Phi`` is accurate there, ``Phi`` itself
    rounds to 1 or underflows: ``jax.random.truncated_normal``, inverting ``erf``, returns
    the upper bound for every draw of an interval 9 standard deviations out in float64, 5 in
    float32). The inverse starts from ``ndtri`` (or, where ``Phi`` underflows, from
    ``z^2 = t - log t``, ``t = -2 log Phi - log 2 pi``) and takes Newton steps on
    ``log Phi(z)``, concave, so they converge from either side. Accurate to round-off of
    ``dtype`` (``log_ndtr``'s series: ~1e-11 relative in float64 beyond 20 standard
    deviations); an interval beyond ~1e19 (float32) or ~1e154 (float64) standard deviations,
    where ``log Phi`` overflows, gives its bound nearest the mean, within the draws' spread
    (about ``1 / |z|``) of the exact answer."""
    given = dtype
    if jnp.finfo(dtype).bits < 32:  # (log_ndtr and ndtri take float32 and float64 only)
        dtype, low, high = jnp.float32, jnp.asarray(low, jnp.float32), jnp.asarray(high, jnp.float32)
    low, high = jnp.broadcast_to(low, shape), jnp.broadcast_to(high, shape)
    mirror = low > -high  # (a comparison, not a sum: no inf - inf for (-inf, inf))
    a, b = jnp.where(mirror, -high, low), jnp.where(mirror, -low, high)
    log_a, log_b = jax.scipy.special.log_ndtr(a), jax.scipy.special.log_ndtr(b)
    tiny = jnp.finfo(dtype).tiny
    u = jax.random.uniform(key, shape, dtype, minval=tiny, maxval=1.0)  # (0, 1): no draw at an infinite bound
    target = log_b + jnp.log1p((1.0 - u) * jnp.expm1(log_a - log_b))  # log Phi(z), in [log_a, log_b]
    half_log_2pi = jnp.asarray(0.5 * math.log(2.0 * math.pi), dtype)
    p = jnp.exp(target)
    t = jnp.maximum(-2.0 * target - 2.0 * half_log_2pi, 1.0)
    lower = jnp.where(p > tiny, jax.scipy.special.ndtri(jnp.where(p > tiny, p, 0.5)), -jnp.sqrt(t - jnp.log(t)))
    # above the median from 1 - p = -expm1(log p), not from p (which rounds to 1)
    z = jnp.where(target < -math.log(2.0), lower, -jax.scipy.special.ndtri(-jnp.expm1(target)))
    for _ in range(4):  # Newton on log Phi(z) = target where z < 0 (2 suffice from these starts)
        log_cdf = jax.scipy.special.log_ndtr(z)
        log_pdf = -0.5 * z * z - half_log_2pi
        z = jnp.where(z < 0, z - (log_cdf - target) * jnp.exp(log_cdf - log_pdf), z)
    z = jnp.where(log_b == -jnp.inf, b, jnp.clip(z, a, b))  # log Phi overflowed: the bound nearest the mean
    return jnp.where(mirror, -z, z).astype(given)


class TruncatedNormal(Distribution):
    """Gaussian ``mean + std * N(0, 1)`` conditioned on ``low <= x <= high``; ``std > 0``.

    Sampled exactly in the far tails as well (an interval many standard deviations from the
    mean: the conditional mean and spread stay right, :func:`_truncated_standard_normal`).
    """

    mean: np.ndarray
    std: np.ndarray
    low: np.ndarray
    high: np.ndarray

    def __init__(self, mean: Any, std: Any, low: Any, high: Any, shape: Any = None):
        self.mean = _param("TruncatedNormal", "mean", mean)
        self.std = _param("TruncatedNormal", "std", std)
        self.low = np.asarray(low, np.float64)
        self.high = np.asarray(high, np.float64)
        if np.any(np.isnan(self.low)) or np.any(np.isnan(self.high)):
            raise ValueError("TruncatedNormal: low and high must not be NaN")
        if np.any(self.std <= 0):
            raise ValueError(f"TruncatedNormal: std must be positive, got {self.std.tolist()}")
        if np.any(self.low >= self.high):
            raise ValueError(
                f"TruncatedNormal: impossible limits, low must be below high (low={self.low.tolist()}, high={self.high.tolist()})"
            )
        params = {"mean": self.mean, "std": self.std, "low": self.low, "high": self.high}
        self.shape = _shape("TruncatedNormal", params, shape)

    def sample(self, key, dtype):
        mean, std = jnp.asarray(self.mean, dtype), jnp.asarray(self.std, dtype)
        low, high = jnp.asarray(self.low, dtype), jnp.asarray(self.high, dtype)
        z = _truncated_standard_normal(key, (low - mean) / std, (high - mean) / std, self.shape, dtype)
        x = mean + std * z  # NaN only where std rounds to 0 in dtype (0 * inf): the limit is the
        x = jnp.where(jnp.isnan(x), jnp.clip(mean, low, high), x)  # point of the interval nearest the mean
        return jnp.clip(x, low, high)  # (the rounding of mean + std z stays inside)

    def support(self):
        return float(np.min(self.low)), float(np.max(self.high))


def _as_distribution(owner: str, value: Any) -> Distribution:
    if isinstance(value, Distribution):
        return value
    if isinstance(value, eqx.Module):
        raise TypeError(f"{owner}: expected a Distribution (Normal, Uniform, ...), got {type(value).__name__}")
    return Fixed(value)


# ------------------------------------------------------------------------------------------
# Model perturbations.

_MASS_FIELDS = ("base_mass", "link_mass")
_INERTIA_FIELDS = ("base_inertia", "link_inertia")
_NON_NEGATIVE_FIELDS = ("joint_stiffness", "joint_damping")
_GEOMETRY_FIELDS = (
    "parent_centroid_to_joint",
    "centroid_to_joint",
    "joint_rpy",
    "centroid_to_end_point",
    "end_point_rpy",
    "gravity",
)
_ARRAY_FIELDS = _MASS_FIELDS + _INERTIA_FIELDS + _NON_NEGATIVE_FIELDS + _GEOMETRY_FIELDS


def _check_field(owner: str, field: str, allowed: Sequence[str]) -> str:
    if field not in allowed:
        raise ValueError(f"{owner}: field {field!r} cannot be perturbed this way; choose one of {list(allowed)}")
    return field


class Perturbation(eqx.Module):
    """Base class of model perturbations: ``draw(key, model, dtype) -> {name: array}`` (what
    is recorded) and ``apply(model, draw) -> Model``; ``check(model)`` validates against the
    nominal model before anything is compiled."""

    def check(self, model: Model) -> None:
        pass

    def draw(self, key: Array, model: Model, dtype: Any) -> dict[str, Array]:
        raise NotImplementedError

    def apply(self, model: Model, draw: dict[str, Array]) -> Model:
        raise NotImplementedError


def _factor_shape(
    owner: str, field: str, factor_shape: tuple[int, ...], field_shape: tuple[int, ...], inertia: bool
) -> None:
    if inertia:
        allowed = [(), field_shape[:-2]] if field_shape[:-2] else [()]
        if factor_shape not in allowed:
            raise ValueError(
                f"{owner}: a factor on {field} must be a scalar or one per body, shape "
                f"{' or '.join(str(s) for s in allowed)}, got {factor_shape} (per-entry factors would break the tensor)"
            )
        return
    if factor_shape != field_shape[: len(factor_shape)]:
        raise ValueError(
            f"{owner}: factor shape {factor_shape} does not match Model.{field} of shape {field_shape} "
            "(give a scalar, or a leading part of the field's shape)"
        )


class Scale(Perturbation):
    """Multiply ``Model.<field>`` by a sampled factor (elementwise, broadcast from the left).

    For masses and inertias the factor must be positive with certainty (e.g. :class:`LogNormal`,
    a :class:`Uniform` with ``low > 0``, a :class:`TruncatedNormal` with ``low > 0``); inertia
    factors are a scalar or one per body (``(n,)`` for ``link_inertia``), so every tensor keeps
    its principal axes and stays physically valid.

    Attributes:
        field: static name of a Model array field.
        factor: the factor's distribution; its shape is ``()`` or a leading part of the field's
            shape (``(n,)`` = one factor per link).
    """

    field: str = eqx.field(static=True)
    factor: Distribution

    def __init__(self, field: str, factor: Any):
        self.field = _check_field("Scale", field, _ARRAY_FIELDS)
        self.factor = _as_distribution(f"Scale({field})", factor)
        low, _ = self.factor.support()
        if field in _MASS_FIELDS + _INERTIA_FIELDS and not self.factor.is_positive():
            raise ValueError(
                f"Scale({field}): impossible limits, the factor can reach {low} <= 0, which would make a mass or "
                "inertia non-positive; use LogNormal, Uniform(low > 0) or TruncatedNormal(low > 0)"
            )
        if field in _NON_NEGATIVE_FIELDS and not low >= 0:
            raise ValueError(f"Scale({field}): the factor can reach {low} < 0, which would make {field} negative")

    def check(self, model):
        field_shape = tuple(getattr(model, self.field).shape)
        _factor_shape(f"Scale({self.field})", self.field, self.factor.shape, field_shape, self.field in _INERTIA_FIELDS)

    def draw(self, key, model, dtype):
        return {"factor": self.factor.sample(key, dtype)}

    def apply(self, model, draw):
        value = getattr(model, self.field)
        factor = draw["factor"]
        factor = jnp.reshape(factor, factor.shape + (1,) * (value.ndim - factor.ndim))
        return eqx.tree_at(lambda m: getattr(m, self.field), model, value * factor)


class Offset(Perturbation):
    """Add a sampled offset to a geometric ``Model.<field>`` (joint/centroid/end-point vectors
    in m, RPY angles in rad, gravity in m/s^2), or to stiffness/damping if it cannot make them
    negative. Masses and inertias are changed with :class:`Scale` or :class:`Payload`.

    Attributes:
        field: static field name.
        delta: distribution whose shape broadcasts to the field's shape.
    """

    field: str = eqx.field(static=True)
    delta: Distribution

    def __init__(self, field: str, delta: Any):
        if field in _MASS_FIELDS + _INERTIA_FIELDS:
            raise ValueError(
                f"Offset({field}): an additive offset can make a mass or inertia invalid; use Scale, InertiaRotation or Payload"
            )
        self.field = _check_field("Offset", field, _GEOMETRY_FIELDS + _NON_NEGATIVE_FIELDS)
        self.delta = _as_distribution(f"Offset({field})", delta)

    def check(self, model):
        field_shape = tuple(getattr(model, self.field).shape)
        try:
            ok = np.broadcast_shapes(self.delta.shape, field_shape) == field_shape
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(
                f"Offset({self.field}): delta of shape {self.delta.shape} does not broadcast to Model.{self.field} of shape {field_shape}"
            )
        if self.field in _NON_NEGATIVE_FIELDS:
            values = np.asarray(getattr(model, self.field), np.float64)
            low = self.delta.support()[0] + (float(np.min(values)) if values.size else 0.0)
            if not low >= 0:
                raise ValueError(f"Offset({self.field}): the offset can make {self.field} negative (down to {low})")

    def draw(self, key, model, dtype):
        return {"delta": self.delta.sample(key, dtype)}

    def apply(self, model, draw):
        value = getattr(model, self.field)
        return eqx.tree_at(lambda m: getattr(m, self.field), model, value + draw["delta"])


class InertiaRotation(Perturbation):
    """Rotate the principal axes of inertia tensors: ``I' = R I R^T`` with
    ``R = exp(skew(phi))``; principal moments are unchanged, so tensors stay valid.

    Attributes:
        field: ``"link_inertia"`` (``phi`` of shape ``(n, 3)`` or ``(3,)``, shared) or
            ``"base_inertia"`` (``phi`` of shape ``(3,)``).
        angle: distribution of the rotation vector ``phi``, rad (body frame of each tensor).
    """

    field: str = eqx.field(static=True)
    angle: Distribution

    def __init__(self, field: str, angle: Any):
        self.field = _check_field("InertiaRotation", field, _INERTIA_FIELDS)
        self.angle = _as_distribution(f"InertiaRotation({field})", angle)

    def check(self, model):
        batch = tuple(getattr(model, self.field).shape[:-2])
        allowed = {(3,), batch + (3,)}
        if self.angle.shape not in allowed:
            raise ValueError(
                f"InertiaRotation({self.field}): rotation vectors must have shape {' or '.join(map(str, sorted(allowed)))}, got {self.angle.shape}"
            )

    def draw(self, key, model, dtype):
        return {"rotation_vector": self.angle.sample(key, dtype)}

    def apply(self, model, draw):
        value = getattr(model, self.field)
        rot = rotation_vector_to_matrix(draw["rotation_vector"])
        rotated = matmul(matmul(rot, value), jnp.swapaxes(rot, -1, -2))
        return eqx.tree_at(lambda m: getattr(m, self.field), model, 0.5 * (rotated + jnp.swapaxes(rotated, -1, -2)))


class Payload(Perturbation):
    """A rigid payload attached to a link, merged into it by the parallel-axis rule
    (:func:`sdjax.editing.merge_payload`).

    The link's mass becomes ``m + mp``; its centroid moves by ``d = mp r / (m + mp)`` (link
    frame), so ``centroid_to_joint``, the link's end-point vectors and its children's
    ``parent_centroid_to_joint`` shift by ``-d``; its inertia about the new centroid is
    ``I + m (|d|^2 E - d d^T) + mp k^2 E + mp (|r - d|^2 E - (r - d)(r - d)^T)``
    (a payload of gyration radius ``k``: a sphere-like body, valid for any ``k >= 0``).

    Attributes:
        link: static link index 1..n (the base cannot carry a payload here).
        mass: distribution of the payload mass ``mp >= 0``, kg.
        offset: ``(3,)`` distribution of ``r``, payload centroid from the link centroid, link
            frame, m.
        radius_of_gyration: distribution of ``k >= 0``, m (default 0: a point mass).
    """

    link: int = eqx.field(static=True)
    mass: Distribution
    offset: Distribution
    radius_of_gyration: Distribution

    def __init__(self, link: int, mass: Any, offset: Any = (0.0, 0.0, 0.0), radius_of_gyration: Any = 0.0):
        self.link = check_count("Payload: link", link, 1)  # (at most n: checked against the model)
        self.mass = _as_distribution("Payload: mass", mass)
        self.offset = _as_distribution("Payload: offset", offset)
        self.radius_of_gyration = _as_distribution("Payload: radius_of_gyration", radius_of_gyration)
        if self.mass.shape != ():
            raise ValueError(f"Payload: mass must be a scalar distribution, got shape {self.mass.shape}")
        if self.offset.shape != (3,):
            raise ValueError(f"Payload: offset must have shape (3,), got {self.offset.shape}")
        if self.radius_of_gyration.shape != ():
            raise ValueError(
                f"Payload: radius_of_gyration must be a scalar distribution, got shape {self.radius_of_gyration.shape}"
            )
        if not self.mass.support()[0] >= 0:
            raise ValueError(f"Payload: impossible limits, the payload mass can reach {self.mass.support()[0]} < 0")
        if not self.radius_of_gyration.support()[0] >= 0:
            raise ValueError(f"Payload: the radius of gyration can reach {self.radius_of_gyration.support()[0]} < 0")

    def check(self, model):
        if not 1 <= self.link <= model.num_joints:
            raise ValueError(f"Payload: link {self.link} does not exist; expected 1..{model.num_joints}")

    def draw(self, key, model, dtype):
        k1, k2, k3 = jax.random.split(key, 3)
        return {
            "mass": self.mass.sample(k1, dtype),
            "offset": self.offset.sample(k2, dtype),
            "radius_of_gyration": self.radius_of_gyration.sample(k3, dtype),
        }

    def apply(self, model, draw):
        gyration = draw["mass"] * draw["radius_of_gyration"] ** 2  # mp k^2: a sphere-like body
        inertia = gyration * jnp.eye(3, dtype=draw["offset"].dtype)
        return merge_payload(model, self.link, draw["mass"], draw["offset"], inertia)


def _name_key(key: Array, name: str) -> Array:
    """A key for one named item: independent of the other items and their order."""
    return jax.random.fold_in(key, zlib.crc32(name.encode()) & 0x7FFFFFFF)


class Uncertainty(eqx.Module):
    """What is random in a study: model perturbations (applied in order) and named parameters.

    Arguments:
        model: mapping (or sequence of pairs) ``name -> Perturbation``; names label the
            recorded draws (``"model/<name>/<item>"``).
        parameters: mapping ``name -> Distribution`` (or constant), handed to the simulation
            as ``params[name]`` and recorded as ``"param/<name>"``.
    """

    model_names: tuple[str, ...] = eqx.field(static=True)
    perturbations: tuple[Perturbation, ...]
    parameters: dict[str, Distribution]

    def __init__(
        self,
        model: Mapping[str, Perturbation] | Sequence[tuple[str, Perturbation]] | None = None,
        parameters: Mapping[str, Any] | None = None,
    ):
        pairs = list(model.items()) if isinstance(model, Mapping) else list(model or ())
        for name, pert in pairs:
            check_name("Uncertainty: model perturbation name", name)
            check_type(
                f"Uncertainty: model[{name!r}]",
                pert,
                Perturbation,
                "a Perturbation (Scale, Offset, InertiaRotation, Payload)",
            )
        names = [n for n, _ in pairs]
        if len(set(names)) != len(names):
            raise ValueError(f"Uncertainty: repeated model perturbation names {names}")
        self.model_names = tuple(names)
        self.perturbations = tuple(p for _, p in pairs)
        params = {}
        for name, dist in dict(parameters or {}).items():
            check_name("Uncertainty: parameter name", name)
            params[name] = _as_distribution(f"Uncertainty: parameters[{name!r}]", dist)
        self.parameters = params

    def check(self, model: Model) -> None:
        """Validate every perturbation against the nominal ``model`` (shapes, link indices)."""
        check_type("Uncertainty.check: model", model, Model, "a sdjax.Model")
        for pert in self.perturbations:
            pert.check(model)

    def sample(self, model: Model, key: Array, index: Any) -> tuple[Model, dict[str, Array], dict[str, Array]]:
        """Sample ``index`` (an int, traceable) of the study with root ``key``.

        Returns:
            ``(model_i, params_i, draws_i)``: the perturbed model, the parameter dict and
            every draw keyed ``"model/<name>/<item>"`` / ``"param/<name>"``.
        """
        dtype = model.dtype
        key = jax.random.fold_in(key, index)
        draws: dict[str, Array] = {}
        for name, pert in zip(self.model_names, self.perturbations):
            drawn = pert.draw(_name_key(key, "model/" + name), model, dtype)
            model = pert.apply(model, drawn)
            draws.update({f"model/{name}/{item}": value for item, value in drawn.items()})
        params = {name: dist.sample(_name_key(key, "param/" + name), dtype) for name, dist in self.parameters.items()}
        draws.update({f"param/{name}": value for name, value in params.items()})
        return model, params, draws


# ------------------------------------------------------------------------------------------
# A ready scenario: rollout under a joint controller with disturbances.

#: Parameter names a :class:`ControlScenario` reads from ``params`` (all optional).
SCENARIO_PARAMETERS = {
    "q0": "(n,) initial joint positions, rad or m",
    "qd0": "(n,) initial joint rates",
    "base_linear_velocity0": "(3,) initial base velocity, inertial frame, m/s",
    "base_angular_velocity0": "(3,) initial base angular velocity, inertial frame, rad/s",
    "q_goal": "(n,) joint set point",
    "kp": "() or (n,) proportional gain (JointPD: N m/rad; ComputedTorque: 1/s^2)",
    "kd": "() or (n,) derivative gain (JointPD: N m s/rad; ComputedTorque: 1/s)",
    "base_force": "(3,) constant disturbance force on the base centroid, inertial frame, N",
    "base_torque": "(3,) constant disturbance torque on the base, inertial frame, N m",
    "tau_bias": "(n,) constant joint torque disturbance, N m",
    "tau_noise": "(num_steps, n) joint torque noise added at each step, N m",
}


class _ScenarioLaw(eqx.Module):
    controller: Any
    base_force: Array
    base_torque: Array
    tau_bias: Array
    tau_noise: Array | None
    torque_limit: Array | None
    dt: Array
    num_end_points: int = eqx.field(static=True)

    def __call__(self, t: Array, state: State) -> Controls:
        tau = self.controller(t, state)
        if self.torque_limit is not None:
            tau = jnp.clip(tau, -self.torque_limit, self.torque_limit)
        tau = tau + self.tau_bias
        if self.tau_noise is not None:
            k = jnp.clip(jnp.round(t / self.dt).astype(jnp.int32), 0, self.tau_noise.shape[0] - 1)
            tau = tau + self.tau_noise[k]
        zeros = jnp.zeros((self.num_end_points, 3), tau.dtype)
        return Controls(
            tau=tau,
            base_force=self.base_force,
            base_torque=self.base_torque,
            end_point_force=zeros,
            end_point_torque=zeros,
        )


class ControlScenario(eqx.Module):
    """``sdjax.rollout`` of a sampled system under a joint controller with disturbances.

    The nominal values below are overridden by the parameters named in
    :data:`SCENARIO_PARAMETERS` when the :class:`Uncertainty` samples them. The controller
    output (saturated at ``torque_limit`` if given: an actuator limit, not a hidden clip) is
    added to ``tau_bias`` and the per-step ``tau_noise[k]``.

    Attributes:
        nominal_model: the controller's model for ``"computed_torque"`` (the plant is the
            sampled model, so the controller does not know the sampled errors).
        initial_state: nominal :class:`~sdjax.State` at ``t = 0``.
        q_goal: ``(n,)`` joint set point.
        kp, kd: nominal gains (see :data:`SCENARIO_PARAMETERS` for units).
        dt: step, s. num_steps: static number of RK4 steps.
        controller: static ``"pd"`` (:class:`~sdjax.JointPD`) or ``"computed_torque"``
            (:class:`~sdjax.ComputedTorque`, floating mode, nominal model).
        torque_limit: ``None`` or positive ``()``/``(n,)`` actuator limit, N m.
        constraints: exact constraints of the plant (:mod:`sdjax.constraints`: a brake
            :class:`~sdjax.constraints.JointLock`, a loop closure, a weld), simulated by
            :func:`~sdjax.constraints.constrained_rollout` (impulse where one engages,
            projection onto the constraints); empty: :func:`sdjax.rollout`.
        active: with ``constraints``: ``None`` (all active throughout), ``(k,)`` flags or an
            ``(num_steps, k)`` schedule (a brake engaging at a given step).

    Under ``vmap`` (as :func:`run_monte_carlo` calls it) on the CPU with Numba installed, a
    scenario without constraints and without mimic joints (for computed torque: with a
    floating-base nominal model of the plant's topology) runs its whole batch in the compiled
    batch kernel, the law included (:func:`sdjax.batch_kernel.controlled_rk4_rollout`); the
    same results as the XLA path to round-off, and derivatives from the XLA path. Other
    scenarios run on the XLA path.
    """

    nominal_model: Model
    initial_state: State
    q_goal: Array
    kp: Array
    kd: Array
    dt: Array
    torque_limit: Array | None
    constraints: tuple[Any, ...]
    active: Array | None
    num_steps: int = eqx.field(static=True)
    controller: str = eqx.field(static=True)

    def __init__(
        self,
        model: Model,
        *,
        q_goal: Any,
        kp: Any,
        kd: Any,
        dt: Any,
        num_steps: int,
        initial_state: State | None = None,
        controller: str = "pd",
        torque_limit: Any = None,
        constraints: Sequence[Any] = (),
        active: Any = None,
    ):
        check_type("ControlScenario: model", model, Model, "a sdjax.Model")
        n = model.num_joints
        dtype = model.dtype
        check_choice("ControlScenario: controller", controller, ("pd", "computed_torque"), "controller")
        num_steps = check_count("ControlScenario: num_steps", num_steps, 1)
        dt = float_array("ControlScenario: dt", dt, shape=(), dtype=dtype, sign="positive")
        self.nominal_model = model
        self.initial_state = make_state(model) if initial_state is None else _scenario_state(model, initial_state)
        self.q_goal = float_array("ControlScenario: q_goal", q_goal, shape=(n,), dtype=dtype)
        self.kp = float_array("ControlScenario: kp", kp, shape=(n,), dtype=dtype, scalar="keep", sign="non-negative")
        self.kd = float_array("ControlScenario: kd", kd, shape=(n,), dtype=dtype, scalar="keep", sign="non-negative")
        self.dt = jnp.asarray(dt, dtype)
        self.num_steps = int(num_steps)
        self.controller = controller
        self.constraints = tuple(constraints)
        if active is not None and not self.constraints:
            raise ValueError("ControlScenario: active schedules constraints; none were given")
        if active is None:
            self.active = None
        else:
            self.active = jnp.asarray(active)
            k = len(self.constraints)
            if self.active.shape not in ((k,), (self.num_steps, k)):
                raise ValueError(
                    f"ControlScenario: active must have shape ({k},) or (num_steps, {k}) = ({self.num_steps}, {k}) "
                    f"(one flag per constraint), got {self.active.shape}"
                )
        if torque_limit is None:
            self.torque_limit = None
        else:
            self.torque_limit = float_array(
                "ControlScenario: torque_limit", torque_limit, shape=(n,), dtype=dtype, scalar="keep", sign="positive"
            )

    def check_parameters(self, params: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` for a parameter of the wrong shape (shapes only; traceable)."""
        n = self.nominal_model.num_joints
        shapes: dict[str, list[tuple[int, ...]]] = {
            "q0": [(n,)], "qd0": [(n,)], "base_linear_velocity0": [(3,)], "base_angular_velocity0": [(3,)],
            "q_goal": [(n,)], "kp": [(), (n,)], "kd": [(), (n,)], "base_force": [(3,)], "base_torque": [(3,)],
            "tau_bias": [(n,)], "tau_noise": [(self.num_steps, n)],
        }  # fmt: skip
        for name, value in params.items():
            if name in shapes and tuple(jnp.shape(value)) not in shapes[name]:
                raise ValueError(
                    f"ControlScenario: parameter {name!r} has shape {tuple(jnp.shape(value))}; expected {' or '.join(map(str, shapes[name]))} ({SCENARIO_PARAMETERS[name]})"
                )

    def __call__(self, model: Model, params: Mapping[str, Array]) -> Trajectory | ConstrainedTrajectory:
        """Simulate one sample; ``model`` is the sampled plant. Returns a :class:`~sdjax.Trajectory`
        (a :class:`~sdjax.constraints.ConstrainedTrajectory` with ``constraints``)."""
        self.check_parameters(params)
        dtype = model.dtype
        s0 = self.initial_state
        get = lambda name, default: jnp.asarray(params[name], dtype) if name in params else default  # noqa: E731
        state = State(
            base_position=s0.base_position,
            base_quaternion=s0.base_quaternion,
            base_linear_velocity=get("base_linear_velocity0", s0.base_linear_velocity),
            base_angular_velocity=get("base_angular_velocity0", s0.base_angular_velocity),
            q=get("q0", s0.q),
            qd=get("qd0", s0.qd),
        )
        kp, kd, goal = get("kp", self.kp), get("kd", self.kd), get("q_goal", self.q_goal)
        n = model.num_joints
        zeros3 = jnp.zeros((3,), dtype)
        law_inputs = _LawInputs(
            kp=kp,
            kd=kd,
            goal=goal,
            limit=self.torque_limit,
            bias=get("tau_bias", jnp.zeros((n,), dtype)),
            noise=get("tau_noise", None) if "tau_noise" in params else None,
            base_force=get("base_force", zeros3),
            base_torque=get("base_torque", zeros3),
        )
        if self.constraints:
            law = _scenario_law(self.controller, model, self.nominal_model, self.dt, law_inputs)
            return constrained_rollout(model, state, self.dt, self.num_steps, law, self.constraints, active=self.active)
        # The initial state's checks of sdjax.rollout, here for both paths (the kernel's too).
        check_state(model, state)
        state = with_base_motion_checked(model, state, "ControlScenario: initial state")
        return _scenario_rollout(self.controller, self.num_steps)(model, self.nominal_model, state, self.dt, law_inputs)


def _scenario_state(model: Model, state: Any) -> State:
    """``state``, checked to be a :class:`~sdjax.State` of ``model`` (one state, its joint
    vectors of the model's ``n``): refused here rather than inside :func:`run_monte_carlo`."""
    check_type("ControlScenario: initial_state", state, State, "a sdjax.State (e.g. sdjax.make_state(model))")
    n = model.num_joints
    expected = {
        "base_position": (3,), "base_quaternion": (4,), "base_linear_velocity": (3,),
        "base_angular_velocity": (3,), "q": (n,), "qd": (n,),
    }  # fmt: skip
    for field, shape in expected.items():
        found = tuple(jnp.shape(getattr(state, field)))
        if found != shape:
            raise ValueError(
                f"ControlScenario: initial_state: State.{field} has shape {found}; expected {shape} for model "
                f"{model.name!r} with n={n} joints (one state, not a batch: sample q0, qd0, ... instead)"
            )
    return state


class _LawInputs(NamedTuple):
    """The sampled inputs of a :class:`ControlScenario`'s law (``limit``, ``noise``: ``None``
    when not given)."""

    kp: Array
    kd: Array
    goal: Array
    limit: Array | None
    bias: Array
    noise: Array | None
    base_force: Array
    base_torque: Array


def _scenario_law(kind: str, model: Model, nominal_model: Model, dt: Array, inputs: _LawInputs) -> _ScenarioLaw:
    """The :class:`ControlScenario` law of one sample (``model``, the plant, gives the number of
    end points)."""
    reference = (inputs.goal, jnp.zeros_like(inputs.goal))
    controller: JointPD | ComputedTorque
    if kind == "pd":
        controller = JointPD(inputs.kp, inputs.kd, reference)
    else:
        controller = ComputedTorque(nominal_model, inputs.kp, inputs.kd, reference)
    return _ScenarioLaw(
        controller=controller,
        base_force=inputs.base_force,
        base_torque=inputs.base_torque,
        tau_bias=inputs.bias,
        tau_noise=inputs.noise,
        torque_limit=inputs.limit,
        dt=dt,
        num_end_points=model.num_end_points,
    )


def _kernel_takes(kind: str, model: Model, nominal_model: Model) -> bool:
    """Whether :func:`sdjax.batch_kernel.controlled_rk4_rollout` simulates this scenario: no
    mimic joints, and for computed torque a floating-base controller model of the plant's
    topology (otherwise the batch runs on the XLA path)."""
    if model.has_mimic:
        return False
    if kind == "pd":
        return True
    return (
        nominal_model.base == "floating"
        and not nominal_model.has_mimic
        and nominal_model.parent == model.parent
        and nominal_model.joint_type == model.joint_type
    )


@functools.cache
def _scenario_rollout(kind: str, num_steps: int) -> Callable[..., Trajectory]:
    """``(model, nominal_model, state, dt, inputs) -> Trajectory``: one sample of a
    :class:`ControlScenario` without constraints, :func:`sdjax.rollout` under its law.

    Under ``vmap`` on the CPU with Numba installed the batch runs in the compiled kernel
    (:func:`sdjax.batch_kernel.controlled_rk4_rollout`: the law and every RK4 step in one call,
    instead of an XLA law and a kernel crossing per RK4 stage). The kernel sees primal values
    only: derivatives are those of the rollout (:func:`sdjax._derivatives.batched_route`)."""

    def simulate(model: Model, nominal_model: Model, state: State, dt: Array, inputs: _LawInputs) -> Trajectory:
        return rollout(model, state, dt, num_steps, _scenario_law(kind, model, nominal_model, dt, inputs))

    def batched(
        axis_size: int, args: tuple[Any, ...], in_batched: Any, mapped: list[Any], rebuild: Callable[[list[Any]], Any]
    ) -> Trajectory:
        model, nominal_model = args[:2]
        if (
            axis_size >= batch_kernel.MIN_ROLLOUT_BATCH
            and batch_kernel.available()
            and _kernel_takes(kind, model, nominal_model)
        ):
            return _kernel_rollout(axis_size, kind, num_steps, args, in_batched)
        return jax.vmap(lambda m: simulate(*rebuild(m)), axis_size=axis_size)(mapped)

    return batched_route(simulate, batched)


def _kernel_rollout(axis_size: int, kind: str, num_steps: int, args: tuple, in_batched: tuple) -> Trajectory:
    """The batched rollout of :func:`_scenario_rollout` by the compiled kernel; ``args = (model,
    nominal_model, state, dt, inputs)``, ``in_batched`` their batch flags (batch on axis 0)."""
    model, nominal_model, state, dt, inputs = args
    model_batched, nominal_batched, state_batched, dt_batched, inputs_batched = in_batched
    dtype = state.q.dtype
    n = model.num_joints

    def per_joint(name: str, default: float) -> tuple[Array, bool]:
        """The input ``name`` (``()`` or ``(n,)`` per sample, or ``None``) as ``(n,)`` or
        ``(B, n)``, and whether it is batched."""
        value, batched = getattr(inputs, name), bool(getattr(inputs_batched, name))
        if value is None:
            return jnp.full((n,), default, dtype), False
        value = jnp.asarray(value, dtype)
        core = value.shape[int(batched) :]
        return jnp.broadcast_to(value if core else value[..., None], value.shape[: int(batched)] + (n,)), batched

    (kp, kp_b), (kd, kd_b), (goal, goal_b), (limit, limit_b), (bias, bias_b) = (
        per_joint(name, default)
        for name, default in (("kp", 0), ("kd", 0), ("goal", 0), ("limit", np.inf), ("bias", 0))
    )
    noise, noise_b = (
        (jnp.zeros((1, n), dtype), False) if inputs.noise is None else (inputs.noise, bool(inputs_batched.noise))
    )
    law = batch_kernel.JointLaw(kind, nominal_model, kp, kd, goal, limit, bias, noise)
    law_batched = batch_kernel.JointLaw(kind, nominal_batched, kp_b, kd_b, goal_b, limit_b, bias_b, noise_b)
    zeros = jnp.zeros((model.num_end_points, 3), dtype)
    loads = Controls(jnp.zeros((n,), dtype), inputs.base_force, inputs.base_torque, zeros, zeros)
    # (the batch flags of the loads, in their structure)
    loads_batched = jax.tree.unflatten(
        jax.tree.structure(loads),
        [False, bool(inputs_batched.base_force), bool(inputs_batched.base_torque), False, False],
    )
    states, tau = batch_kernel.controlled_rk4_rollout(
        axis_size,
        model,
        state,
        dt,
        law,
        loads,
        num_steps,
        (model_batched, state_batched, dt_batched, law_batched, loads_batched),
    )

    def batch_of(x: Array, batched: bool) -> Array:
        return x if batched else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x))

    # The trajectory as rollout returns it: N + 1 states, the controls held over each step.
    after = batch_kernel.unpacked_states(states, state)
    history = jax.tree.map(
        lambda x0, b, xs: jnp.concatenate([batch_of(x0, b)[:, None], xs], axis=1), state, state_batched, after
    )
    steps, dt = jnp.arange(num_steps + 1, dtype=dtype), jnp.asarray(dt, dtype)
    time = steps * (dt[:, None] if dt_batched else dt)
    held = jax.tree.map(
        lambda x, b: jnp.broadcast_to(batch_of(x, b)[:, None], (axis_size, num_steps) + jnp.shape(x)[int(b) :]),
        loads,
        loads_batched,
    )
    return Trajectory(time=batch_of(time, dt_batched), states=history, controls=eqx.tree_at(lambda c: c.tau, held, tau))


# ------------------------------------------------------------------------------------------
# Metrics of a Trajectory.


def final_attitude_error(traj: Trajectory, model: Model | None = None, params: Any = None) -> Array:
    """Angle of the base rotation from the initial to the final attitude, rad, in ``[0, pi]``."""
    quats = traj.states.base_quaternion
    rel = quat_multiply(quat_conjugate(quats[0]), quats[-1])
    vec_sq = jnp.sum(rel[:3] ** 2)
    vec_norm = jnp.where(vec_sq > 0, jnp.sqrt(jnp.where(vec_sq > 0, vec_sq, 1.0)), 0.0)  # NaN-free gradient at 0
    return 2.0 * jnp.arctan2(vec_norm, jnp.abs(rel[3]))


def peak_joint_torque(traj: Trajectory, model: Model | None = None, params: Any = None) -> Array:
    """Largest applied joint torque magnitude over the run, ``max |tau|``, N m (or N)."""
    return jnp.max(jnp.abs(traj.controls.tau))


def final_base_drift(traj: Trajectory, model: Model | None = None, params: Any = None) -> Array:
    """Distance of the final base centroid from the initial one, m."""
    delta = traj.states.base_position[-1] - traj.states.base_position[0]
    return jnp.sqrt(jnp.sum(delta**2))


def final_joint_error(q_goal: Any) -> Callable[..., Array]:
    """A metric: ``max_i |q_i(T) - q_goal_i|`` (uses ``params["q_goal"]`` when sampled)."""
    goal = np.asarray(q_goal, np.float64)

    def metric(traj: Trajectory, model: Model | None = None, params: Any = None) -> Array:
        q = traj.states.q[-1]
        target = params["q_goal"] if params is not None and "q_goal" in params else jnp.asarray(goal, q.dtype)
        return jnp.max(jnp.abs(q - target))

    return metric


def manoeuvre_metrics(q_goal: Any) -> dict[str, Callable[..., Array]]:
    """The four metrics of a point-to-point manoeuvre study (the Monte-Carlo notebook's, the
    ``sdjax montecarlo`` job's): ``attitude_error_deg`` (:func:`final_attitude_error` in
    degrees), ``peak_joint_torque``, ``final_joint_error`` (to ``q_goal``) and ``base_drift``."""
    return {
        "attitude_error_deg": lambda traj, model=None, params=None: jnp.rad2deg(final_attitude_error(traj)),
        "peak_joint_torque": peak_joint_torque,
        "final_joint_error": final_joint_error(q_goal),
        "base_drift": final_base_drift,
    }


# ------------------------------------------------------------------------------------------
# Results.


class MonteCarloResults:
    """Per-sample metrics and draws of a study.

    Attributes:
        metrics: ``{name: (B,) float64 array}``.
        draws: ``{"model/<name>/<item>" or "param/<name>": (B, ...) array}`` (empty if the run
            used ``keep_draws=False``).
        seed: root seed. num_samples: ``B``.
        info: run facts (model name, chunk size, devices, processes, compile and run times,
            ``samples_per_s``, ``steps_per_s`` where the simulation has ``num_steps``).

    File layout (:meth:`save`, ``numpy.savez_compressed``, no pickles): ``metric/<name>`` (B,),
    ``draw/<key>`` (B, ...), and ``meta`` a 0-d unicode array holding JSON
    ``{"format": "sdjax.montecarlo/1", "seed", "num_samples", "metric_names", "draw_names", "info"}``.
    """

    def __init__(
        self,
        metrics: dict[str, np.ndarray],
        draws: dict[str, np.ndarray],
        seed: int,
        num_samples: int,
        info: dict | None = None,
    ):
        self.metrics = {k: np.asarray(v) for k, v in metrics.items()}
        self.draws = {k: np.asarray(v) for k, v in draws.items()}
        self.seed = int(seed)
        self.num_samples = int(num_samples)
        self.info = dict(info or {})

    def summary(self, percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> dict[str, dict[str, float]]:
        """``{metric: {"mean", "std", "min", "p5", "p50", "p95", "max", "nonfinite"}}`` over
        the finite samples (``nonfinite`` counts the others, e.g. diverged runs)."""
        pcts = [float(p) for p in percentiles]
        if any(not 0 <= p <= 100 for p in pcts):
            raise ValueError(f"summary: percentiles must lie in [0, 100], got {pcts}")
        out = {}
        for name, values in self.metrics.items():
            finite = values[np.isfinite(values)]
            row: dict[str, float] = {"nonfinite": float(values.size - finite.size)}
            if finite.size:
                row.update(
                    mean=float(np.mean(finite)),
                    std=float(np.std(finite)),
                    min=float(np.min(finite)),
                    max=float(np.max(finite)),
                )
                row.update({f"p{p:g}": float(np.percentile(finite, p)) for p in pcts})
            else:
                row.update(mean=math.nan, std=math.nan, min=math.nan, max=math.nan)
                row.update({f"p{p:g}": math.nan for p in pcts})
            out[name] = row
        return out

    def confidence_intervals(
        self, confidence: float = 0.95, percentiles: Sequence[float] = DEFAULT_PERCENTILES
    ) -> dict[str, dict[str, tuple[float, float]]]:
        """Confidence intervals of each metric's mean and percentiles over the finite samples:
        ``{metric: {"mean": (low, high), "p5": (low, high), ...}}``.

        Percentiles: distribution-free order-statistic intervals ``[x_(j), x_(k)]`` with the
        ranks chosen from the binomial distribution of the number of samples below the true
        percentile, so the coverage is at least ``confidence`` for any continuous distribution
        (``-inf``/``inf`` where too few samples lie on one side). Mean: the normal
        approximation ``mean +- z s / sqrt(B)`` (large ``B``).
        """
        alpha = 1.0 - check_fraction("MonteCarloResults.confidence_intervals: confidence", confidence)
        z = statistics.NormalDist().inv_cdf(1.0 - alpha / 2.0)
        out: dict[str, dict[str, tuple[float, float]]] = {}
        for name, values in self.metrics.items():
            finite = np.sort(values[np.isfinite(values)])
            count = finite.size
            row: dict[str, tuple[float, float]] = {}
            if count:
                half = z * float(np.std(finite, ddof=1)) / math.sqrt(count) if count > 1 else math.inf
                row["mean"] = (float(np.mean(finite)) - half, float(np.mean(finite)) + half)
            else:
                row["mean"] = (math.nan, math.nan)
            for p in percentiles:
                low_rank, high_rank = _order_statistic_ranks(count, float(p) / 100.0, alpha)
                low = float(finite[low_rank - 1]) if 1 <= low_rank <= count else -math.inf
                high = float(finite[high_rank - 1]) if 1 <= high_rank <= count else math.inf
                row[f"p{float(p):g}"] = (low, high) if count else (math.nan, math.nan)
            out[name] = row
        return out

    def probability(
        self, metric: str, *, below: float | None = None, above: float | None = None, confidence: float = 0.95
    ) -> tuple[float, float, float]:
        """Estimated probability that ``metric`` lies below ``below`` and/or above ``above``
        (a mission question: "how likely does the capture miss by more than 1 cm?"), with the
        Wilson score interval: ``(estimate, low, high)``. Non-finite samples count as outside
        (a diverged run does not meet a requirement). A bound is a real number or ``+-inf``
        (``below=inf``: the share of runs that did not diverge), never NaN (``ValueError``).
        """
        if metric not in self.metrics:
            raise ValueError(f"probability: unknown metric {metric!r}; available: {list(self.metrics)}")
        if below is None and above is None:
            raise ValueError("probability: give below= and/or above=")
        if below is not None:
            below = _bound("MonteCarloResults.probability: below", below)
        if above is not None:
            above = _bound("MonteCarloResults.probability: above", above)
        alpha = 1.0 - check_fraction("MonteCarloResults.probability: confidence", confidence)
        values = self.metrics[metric]
        inside = np.isfinite(values)
        if below is not None:
            inside &= values < below
        if above is not None:
            inside &= values > above
        return _wilson(int(np.sum(inside)), values.size, alpha)

    def requirements_met(self, bounds: dict[str, float], *, confidence: float = 0.95) -> tuple[float, float, float]:
        """Estimated probability that every requirement holds at once, ``metric < bound`` for
        each ``{metric: bound}`` in ``bounds`` (a sample meets the set only if it meets each;
        non-finite samples meet none), with the Wilson score interval: ``(estimate, low, high)``.
        A bound may be ``inf`` (the requirement that the run did not diverge), never NaN."""
        if not bounds:
            raise ValueError("requirements_met: give at least one {metric: bound}")
        unknown = [name for name in bounds if name not in self.metrics]
        if unknown:
            raise ValueError(f"requirements_met: unknown metric(s) {unknown}; available: {list(self.metrics)}")
        limits = {
            name: _bound(f"MonteCarloResults.requirements_met: bounds[{name!r}]", b) for name, b in bounds.items()
        }
        alpha = 1.0 - check_fraction("MonteCarloResults.requirements_met: confidence", confidence)
        inside = np.ones(self.num_samples, bool)
        for name, bound in limits.items():
            values = self.metrics[name].reshape(self.num_samples)
            inside &= np.isfinite(values) & (values < bound)
        return _wilson(int(np.sum(inside)), self.num_samples, alpha)

    def sensitivity(self, metric: str, *, confidence: float = 0.95) -> list[Sensitivity]:
        """The uncertain inputs ranked by how strongly ``metric`` follows them: which uncertainty
        to reduce first.

        For every recorded draw entry (``"model/payload/mass"``, ``"param/kp[3]"``: the column
        names of :meth:`to_pandas`) Spearman's rank correlation with the metric over the
        samples where the metric is finite (average ranks for ties), with the interval of
        Fisher's ``z = atanh(rho)`` and standard error ``sqrt(1.06 / (B - 3))`` (Fieller,
        Hartley and Pearson, Biometrika 44, 1957). Rank correlation measures any monotone
        dependence, not only a linear one, and is unaffected by the inputs' units. Entries that
        do not vary (a ``Fixed`` draw) are left out.

        Returns:
            :class:`Sensitivity` rows, largest ``|rank_correlation|`` first (empty without
            recorded draws, ``keep_draws=False``, or when the metric does not vary).
        """
        if metric not in self.metrics:
            raise ValueError(f"sensitivity: unknown metric {metric!r}; available: {list(self.metrics)}")
        alpha = 1.0 - check_fraction("MonteCarloResults.sensitivity: confidence", confidence)
        values = self.metrics[metric].reshape(self.num_samples)
        finite = np.isfinite(values)
        count = int(np.sum(finite))
        if count < 4:
            raise ValueError(f"sensitivity: {metric!r} has {count} finite samples; the interval needs at least 4")
        z = statistics.NormalDist().inv_cdf(1.0 - alpha / 2.0)
        half = z * math.sqrt(1.06 / (count - 3))
        if np.all(values[finite] == values[finite][0]):
            return []  # a constant metric follows no input
        metric_ranks = _average_ranks(values[finite])
        rows = []
        for name, column in self._draw_columns():
            x = column[finite].astype(np.float64)
            if np.all(x == x[0]):
                continue
            rho = float(np.corrcoef(_average_ranks(x), metric_ranks)[0, 1])
            centre = math.atanh(min(max(rho, -1.0 + 1e-15), 1.0 - 1e-15))
            rows.append(Sensitivity(name, rho, math.tanh(centre - half), math.tanh(centre + half)))
        return sorted(rows, key=lambda row: -abs(row.rank_correlation))

    def summary_table(self, percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> str:
        """The summary as a fixed-width text table (one row per metric)."""
        summary = self.summary(percentiles)
        cols = ["mean", "std", "min"] + [f"p{float(p):g}" for p in percentiles] + ["max", "nonfinite"]
        width = max([len("metric")] + [len(k) for k in summary])
        lines = [f"{'metric':<{width}} " + " ".join(f"{c:>11}" for c in cols)]
        for name, row in summary.items():
            lines.append(f"{name:<{width}} " + " ".join(f"{row[c]:>11.4g}" for c in cols))
        return "\n".join(lines)

    def save(self, path: Any) -> None:
        """Write the results as ``.npz`` (layout in the class docstring).

        Raises:
            ValueError: no metrics (a results file holds at least one: :meth:`load` reads the
                number of samples from them).
        """
        if not self.metrics:
            raise ValueError("MonteCarloResults.save: no metrics; a results file holds at least one")
        meta = {
            "format": FILE_FORMAT,
            "seed": self.seed,
            "num_samples": self.num_samples,
            "metric_names": list(self.metrics),
            "draw_names": list(self.draws),
            "info": self.info,
        }
        arrays = {f"metric/{k}": v for k, v in self.metrics.items()}
        arrays.update({f"draw/{k}": v for k, v in self.draws.items()})
        arrays["meta"] = np.array(json.dumps(meta))
        # (mypy: a key could be savez_compressed's bool allow_pickle; none of these names is.)
        np.savez_compressed(path, **arrays)  # type: ignore[arg-type]

    @classmethod
    def load(cls, path: Any) -> MonteCarloResults:
        """Read a file written by :meth:`save` (no pickles are loaded; every entry's shape and
        dtype checked from its header before it is read, :class:`sdjax.io.npz.NpzArchive`).

        Raises:
            ValueError: naming the file and what is wrong (missing, not an ``.npz``, another
                format, a missing or malformed entry).
        """
        from sdjax.io.npz import NpzArchive

        with NpzArchive(path, "sdjax Monte-Carlo results file") as data:
            name, meta = data.name, data.meta(FILE_FORMAT)
            for key, kind in (
                ("seed", int),
                ("num_samples", int),
                ("metric_names", list),
                ("draw_names", list),
                ("info", dict),
            ):
                if not isinstance(meta.get(key), kind) or isinstance(meta.get(key), bool):
                    raise ValueError(f"{name}: 'meta' {key} must be a {kind.__name__}, got {meta.get(key)!r}")
            samples = meta["num_samples"]
            if samples < 0:
                raise ValueError(f"{name}: 'meta' num_samples must be non-negative, got {samples}")
            for key in ("metric_names", "draw_names"):
                if not all(isinstance(k, str) for k in meta[key]):
                    raise ValueError(f"{name}: 'meta' {key} must be a list of names")
                repeated = sorted(k for k, count in collections.Counter(meta[key]).items() if count > 1)
                if repeated:
                    raise ValueError(f"{name}: 'meta' {key} lists {repeated} more than once")
            if not meta["metric_names"]:
                # (a study has at least one metric, whose length then pins num_samples: without
                # one, nothing in the file backs the count that to_pandas would allocate)
                raise ValueError(f"{name}: 'meta' metric_names is empty; a results file holds at least one metric")
            # every metric's length is num_samples (checked from its header), every draw's leading axis too
            metrics = {k: data.array(f"metric/{k}", (samples,), kinds="biuf") for k in meta["metric_names"]}
            draws = {k: data.array(f"draw/{k}", kinds="biuf", leading=samples) for k in meta["draw_names"]}
            listed = (
                {"meta"} | {f"metric/{k}" for k in meta["metric_names"]} | {f"draw/{k}" for k in meta["draw_names"]}
            )
            unlisted = sorted(set(data.entries) - listed)
            if unlisted:
                raise ValueError(f"{name}: entries {unlisted} are not listed in 'meta' (metric_names, draw_names)")
        return cls(metrics, draws, meta["seed"], samples, meta["info"])

    # --- Tables (pandas, Parquet) ---------------------------------------------------------

    def _draw_columns(self) -> list[tuple[str, np.ndarray]]:
        """Every draw's entries as ``(B,)`` columns named ``name`` (scalar draws) or
        ``name[i]`` / ``name[i,j]``, in order (a list: two draws whose columns would share a
        name stay two columns, for :meth:`to_parquet` to refuse)."""
        columns = []
        for name, values in self.draws.items():
            shape = values.shape[1:]
            flat = values.reshape(self.num_samples, -1)
            for column, index in enumerate(np.ndindex(*shape)):
                columns.append((f"{name}[{','.join(map(str, index))}]" if shape else name, flat[:, column]))
        return columns

    def _columns(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """The flat table (``{column: (B,) array}``: ``sample``, the metrics, every draw's
        entries as ``name[i]`` / ``name[i,j]``) and its metadata (see :meth:`to_parquet`)."""
        import sdjax

        columns: dict[str, np.ndarray] = {"sample": np.arange(self.num_samples, dtype=np.int64)}

        def add(column: str, values: np.ndarray) -> None:
            if column in columns:
                raise ValueError(f"to_parquet: two columns would be named {column!r}; rename the metric or draw")
            columns[column] = values

        for name, values in self.metrics.items():
            add(name, values.reshape(self.num_samples))
        for column, values in self._draw_columns():
            add(column, values)
        draws = {
            name: {"shape": list(values.shape[1:]), "dtype": values.dtype.str} for name, values in self.draws.items()
        }
        meta = {
            "format": PARQUET_FORMAT,
            "seed": self.seed,
            "num_samples": self.num_samples,
            "model": self.info.get("model"),
            "sdjax_version": sdjax.__version__,
            "metric_names": list(self.metrics),
            "metric_dtypes": [values.dtype.str for values in self.metrics.values()],
            "draws": draws,
            "info": self.info,
        }
        return columns, meta

    def to_pandas(self) -> Any:
        """The results as a ``pandas.DataFrame``: one row per sample, the columns of
        :meth:`to_parquet` (``sample``, every metric, every draw entry) and the run's metadata
        (seed, ``num_samples``, model, sdjax version, ``info``) in ``DataFrame.attrs``.

        Raises:
            ImportError: pandas is not installed (``pip install "sdjax[data]"``).
        """
        try:
            import pandas as pd
        except ImportError:
            raise ImportError('MonteCarloResults.to_pandas needs pandas: pip install "sdjax[data]"') from None
        columns, meta = self._columns()
        frame = pd.DataFrame(columns)
        frame.attrs.update(meta)
        return frame

    def to_parquet(self, path: Any, *, overwrite: bool = False) -> None:
        """Write the results as a Parquet table (through pyarrow) readable by pandas
        (``pandas.read_parquet``), polars, DuckDB or Spark.

        One row per sample; columns ``sample`` (int64, the sample index), every metric (its
        dtype, float64 as written, NaN kept for diverged samples) and every kept draw flattened
        in C order to named columns: ``model/mass/factor[3]``, ``param/tau_noise[2,5]``, a
        scalar draw keeps its name (``param/kp``). The schema metadata key
        ``sdjax.montecarlo`` holds JSON ``{"format": "sdjax.montecarlo.parquet/1", "seed",
        "num_samples", "model", "sdjax_version", "metric_names", "metric_dtypes", "draws":
        {name: {"shape", "dtype"}}, "info"}``, from which :meth:`from_parquet` rebuilds every
        draw's shape and dtype: the table holds everything :meth:`save` stores. The ``.npz``
        of :meth:`save` stays the canonical format (checked header by header, no extra
        dependency); Parquet is for analysis.

        Raises:
            ValueError: ``path`` exists and ``overwrite`` is false, or two columns would share
                a name (a metric called ``sample``).
            ImportError: pyarrow is not installed (``pip install "sdjax[data]"``).
        """
        pa, pq = _pyarrow("to_parquet")
        name = os.fspath(path)
        if os.path.exists(name) and not overwrite:
            raise ValueError(f"{name}: exists; pass overwrite=True to replace it")
        columns, meta = self._columns()
        table = pa.table({k: pa.array(np.ascontiguousarray(v)) for k, v in columns.items()})
        table = table.replace_schema_metadata({PARQUET_METADATA_KEY: json.dumps(meta)})
        pq.write_table(table, name)

    @classmethod
    def from_parquet(cls, path: Any) -> MonteCarloResults:
        """Read a table written by :meth:`to_parquet` (metrics, draws with their shapes and
        dtypes, seed, ``num_samples``, ``info``: what :meth:`save` stores).

        Raises:
            ValueError: naming the file and what is wrong (missing, not Parquet, no
                ``sdjax.montecarlo`` metadata, another format, a missing or malformed column).
            ImportError: pyarrow is not installed (``pip install "sdjax[data]"``).
        """
        from sdjax.io.inputs import naming_file, parse_json

        pa, pq = _pyarrow("from_parquet")
        name = os.fspath(path)
        what = "sdjax Monte-Carlo Parquet table"
        if not os.path.isfile(name):
            raise ValueError(f"{name}: no such file (expected a {what})")
        with naming_file(name):
            try:
                table = pq.read_table(name)
            except (pa.ArrowException, OSError) as err:
                raise ValueError(f"{name}: not a {what} (Parquet): {err}") from None
            stored = (table.schema.metadata or {}).get(PARQUET_METADATA_KEY.encode())
            if stored is None:
                raise ValueError(f"no {PARQUET_METADATA_KEY!r} schema metadata; not a {what}")
            try:
                meta = parse_json(stored.decode("utf-8"))  # (UnicodeDecodeError is a ValueError)
            except ValueError as err:
                raise ValueError(f"schema metadata {PARQUET_METADATA_KEY!r} is {err}") from None
            if not isinstance(meta, dict) or meta.get("format") != PARQUET_FORMAT:
                found = meta.get("format") if isinstance(meta, dict) else meta
                raise ValueError(f"format {found!r}, expected {PARQUET_FORMAT!r}; not a {what}")
            for key, kind in (
                ("seed", int),
                ("num_samples", int),
                ("metric_names", list),
                ("metric_dtypes", list),
                ("draws", dict),
                ("info", dict),
            ):
                if not isinstance(meta.get(key), kind) or isinstance(meta.get(key), bool):
                    raise ValueError(f"metadata {key} must be a {kind.__name__}, got {meta.get(key)!r}")
            samples = meta["num_samples"]
            if samples < 0 or table.num_rows != samples:
                raise ValueError(f"{table.num_rows} rows, metadata num_samples {samples}; not a complete {what}")
            if len(meta["metric_dtypes"]) != len(meta["metric_names"]):
                raise ValueError("metadata metric_dtypes and metric_names differ in length")
            if not all(isinstance(k, str) for k in meta["metric_names"]):
                raise ValueError(f"metadata metric_names must be a list of names, got {meta['metric_names']!r}")
            metric_counts: collections.Counter[str] = collections.Counter(meta["metric_names"])
            repeated = sorted(k for k, count in metric_counts.items() if count > 1)
            if repeated:
                raise ValueError(f"metadata metric_names lists {repeated} more than once")

            def column(key: str, dtype: Any) -> np.ndarray:
                if key not in table.column_names:
                    raise ValueError(f"no column {key!r}; not a complete {what}")
                try:
                    values = np.asarray(table.column(key).to_numpy())
                except pa.ArrowException as err:
                    raise ValueError(f"column {key!r} is not readable: {err}") from None
                if values.dtype != dtype:
                    raise ValueError(f"column {key!r} has dtype {values.dtype}, expected {dtype}")
                return values

            def number_type(owner: str, dtype: Any) -> np.dtype:
                try:
                    kind = np.dtype(dtype)
                except (TypeError, ValueError):
                    kind = np.dtype(object)
                if kind.kind not in "biuf":
                    raise ValueError(f"metadata {owner} has dtype {dtype!r}, expected a number type")
                return kind

            specs: dict[str, tuple[list[int], np.dtype, list[str]]] = {}  # draw: shape, dtype, its columns
            for key, spec in meta["draws"].items():
                shape = spec.get("shape") if isinstance(spec, dict) else None
                if not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape):
                    raise ValueError(f"metadata draw {key!r} has no valid shape: {spec!r}")
                names = [f"{key}[{','.join(map(str, index))}]" if shape else key for index in np.ndindex(*shape)]
                specs[key] = (shape, number_type(f"draw {key!r}", spec.get("dtype")), names)
            # Every column is one the metadata accounts for, once (pyarrow allows repeated names).
            listed = collections.Counter(
                ["sample", *meta["metric_names"], *(c for *_, cs in specs.values() for c in cs)]
            )
            found = collections.Counter(table.column_names)
            unlisted = sorted(k for k in found if found[k] > listed[k])
            if unlisted:
                raise ValueError(f"columns {unlisted} are not listed in the metadata (or repeated); not a {what}")
            if not np.array_equal(column("sample", np.dtype(np.int64)), np.arange(samples)):
                raise ValueError(f"column 'sample' is not 0, 1, ..., {samples - 1}; not a {what}")
            metrics = {
                k: column(k, number_type(f"metric {k!r}", d))
                for k, d in zip(meta["metric_names"], meta["metric_dtypes"])
            }
            draws = {}
            for key, (shape, dtype, names) in specs.items():
                parts = [column(c, dtype) for c in names]
                flat = np.stack(parts, axis=1) if parts else np.zeros((samples, 0), dtype)
                draws[key] = flat.reshape((samples, *shape))
        return cls(metrics, draws, meta["seed"], samples, meta["info"])

    def plot(
        self, metrics: Sequence[str] | None = None, bins: int = 40, percentiles: Sequence[float] = DEFAULT_PERCENTILES
    ):
        """Histograms of the metrics with percentile lines; returns the matplotlib figure."""
        import matplotlib.pyplot as plt

        names = list(self.metrics) if metrics is None else list(metrics)
        for name in names:
            if name not in self.metrics:
                raise ValueError(f"plot: unknown metric {name!r}; available: {list(self.metrics)}")
        cols = min(3, max(1, len(names)))
        rows = max(1, math.ceil(len(names) / cols))
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
        for ax, name in zip(axes.flat, names):
            values = self.metrics[name]
            values = values[np.isfinite(values)]
            ax.hist(values, bins=bins, color="tab:blue", alpha=0.8)
            for p, style in zip(percentiles, ("--", "-", "--", ":", ":")):
                if values.size:
                    ax.axvline(
                        np.percentile(values, p), color="k", linestyle=style, linewidth=1, label=f"p{float(p):g}"
                    )
            ax.set_title(name)
            ax.set_ylabel("samples")
        for ax in list(axes.flat)[len(names) :]:
            ax.set_visible(False)
        if names:
            axes.flat[0].legend(fontsize=8)
        fig.suptitle(f"Monte Carlo: B = {self.num_samples}, seed = {self.seed}")
        fig.tight_layout()
        return fig

    def __repr__(self) -> str:
        return f"MonteCarloResults(num_samples={self.num_samples}, seed={self.seed}, metrics={list(self.metrics)}, draws={len(self.draws)})"


def _pyarrow(method: str) -> tuple[Any, Any]:
    """``(pyarrow, pyarrow.parquet)``, imported on first use (an optional dependency)."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise ImportError(f'MonteCarloResults.{method} needs pyarrow: pip install "sdjax[data]"') from None
    return pyarrow, pyarrow.parquet


class Sensitivity(NamedTuple):
    """One uncertain input's rank correlation with a metric (:meth:`MonteCarloResults.sensitivity`).

    Attributes:
        input: draw column, e.g. ``"model/payload/mass"`` or ``"param/kp[3]"``.
        rank_correlation: Spearman's rho in ``[-1, 1]`` (sign: the metric grows with the input
            where positive).
        low, high: its confidence interval; one that contains 0 does not show a dependence.
    """

    input: str
    rank_correlation: float
    low: float
    high: float


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks of ``values``, ties sharing their average rank."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)  # rank of the last member of each group of equal values
    return (ends - (counts - 1) / 2.0)[inverse.reshape(-1)]


def _bound(name: str, value: Any) -> float:
    """A requirement's bound as a ``float``: a real number, ``inf`` and ``-inf`` included
    (``below=inf`` asks for the finite samples, the runs that did not diverge: a legitimate
    question, and ``-inf`` its empty counterpart), never NaN (every comparison with NaN is
    false, so no sample would meet it and the estimate would be a silent 0)."""
    if _is_nan(value):
        raise ValueError(f"{name}: must be a number (inf allowed), got nan: no sample compares with NaN")
    return check_scalar(name, value, finite=False)


def _is_nan(value: Any) -> bool:
    try:
        return bool(np.ndim(value) == 0 and np.isnan(value))
    except TypeError:
        return False


def _wilson(hits: int, count: int, alpha: float) -> tuple[float, float, float]:
    """``hits / count`` and its Wilson score interval at level ``1 - alpha`` (``nan`` for no
    samples): ``(estimate, low, high)``."""
    if count == 0:
        return math.nan, math.nan, math.nan
    z = statistics.NormalDist().inv_cdf(1.0 - alpha / 2.0)
    estimate = hits / count
    centre = (estimate + z * z / (2 * count)) / (1 + z * z / count)
    half = z / (1 + z * z / count) * math.sqrt(estimate * (1 - estimate) / count + z * z / (4 * count * count))
    return estimate, max(0.0, centre - half), min(1.0, centre + half)


def samples_needed(max_probability: float, *, confidence: float = 0.95, failures: int = 0) -> int:
    """Samples a Monte-Carlo study needs to show that an event (a missed requirement) has
    probability at most ``max_probability``, at the given confidence, when at most ``failures``
    samples show it.

    The smallest ``B`` with ``P(Binomial(B, p) <= failures) <= 1 - confidence`` for
    ``p = max_probability``: the one-sided Clopper-Pearson bound. For zero failures it is
    ``ceil(ln(1 - confidence) / ln(1 - p))`` (the success-run theorem: about ``3 / p`` at 95 %,
    299 samples for 1 %); every failure seen raises it (473 for one failure at 1 %, 95 %).

    Arguments:
        max_probability: the requirement's largest accepted probability, in ``(0, 1)``.
        confidence: in ``(0, 1)``.
        failures: int >= 0, failures allowed among the samples.

    Returns:
        The number of samples.
    """
    alpha = 1.0 - check_fraction("samples_needed: confidence", confidence)
    p = check_fraction("samples_needed: max_probability", max_probability)
    failures = check_count("samples_needed: failures", failures, 0)
    k = int(failures)
    if k == 0:
        return max(1, math.ceil(math.log(alpha) / math.log1p(-p) - 1e-12))

    def tail(count: int) -> float:  # P(Binomial(count, p) <= k), summed in log space
        i = np.arange(k + 1)
        log_pmf = (
            math.lgamma(count + 1)
            - np.array([math.lgamma(j + 1) + math.lgamma(count - j + 1) for j in i])
            + i * math.log(p) + (count - i) * math.log1p(-p)
        )  # fmt: skip
        return float(np.sum(np.exp(log_pmf)))

    low, high = k, max(k + 1, math.ceil((k + 1) / p))
    while tail(high) > alpha:  # the tail falls with the sample count; bracket, then bisect
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if tail(middle) > alpha else (low, middle)
    return high


def _order_statistic_ranks(count: int, fraction: float, alpha: float) -> tuple[int, int]:
    """1-based ranks ``(j, k)`` with ``P(x_(j) <= xi_p <= x_(k)) >= 1 - alpha`` for the
    ``fraction`` quantile ``xi_p`` of ``count`` samples: the number ``N`` of samples below
    ``xi_p`` is binomial ``(count, fraction)`` and ``x_(j) <= xi_p < x_(k)`` iff
    ``j <= N < k``. ``j = 0`` or ``k = count + 1`` where a side has too little probability."""
    if count == 0:
        return 0, 1
    if fraction <= 0.0:  # the distribution's minimum: only bounded above, by the smallest sample
        return 0, 1
    if fraction >= 1.0:
        return count, count + 1
    k = np.arange(count + 1)
    with np.errstate(divide="ignore"):
        log_pmf = (
            math.lgamma(count + 1)
            - np.array([math.lgamma(i + 1) + math.lgamma(count - i + 1) for i in k])
            + k * np.log(fraction) + (count - k) * np.log1p(-fraction)
        )  # fmt: skip
    cdf = np.cumsum(np.exp(log_pmf))  # cdf[i] = P(N <= i)
    # Largest j with P(N <= j - 1) <= alpha / 2; smallest k with P(N <= k - 1) >= 1 - alpha / 2.
    below = np.nonzero(cdf <= alpha / 2.0)[0]
    j = int(below[-1]) + 1 if below.size else 0
    above = np.nonzero(cdf >= 1.0 - alpha / 2.0)[0]
    high = int(above[0]) + 1 if above.size else count + 1
    return j, high


# ------------------------------------------------------------------------------------------
# The engine.


def run_monte_carlo(
    model: Model,
    uncertainty: Uncertainty,
    simulate: Callable[[Model, dict[str, Array]], Any],
    metrics: Mapping[str, Callable[..., Array]],
    *,
    num_samples: int,
    seed: int = 0,
    chunk_size: int | None = None,
    devices: Sequence[Any] | None = None,
    progress: bool = True,
    keep_draws: bool | Sequence[str] = True,
) -> MonteCarloResults:
    """Simulate ``num_samples`` sampled systems and evaluate the metrics of each.

    Sample ``i`` uses the key ``fold_in(key(seed), i)``: results do not depend on
    ``chunk_size``, ``devices`` or the number of processes (up to floating-point round-off of
    batched vs unbatched kernels, ~1e-15 relative in float64).

    Arguments:
        model: nominal system (its dtype sets the dtype of every draw).
        uncertainty: the :class:`Uncertainty` (perturbations of the model, parameters).
        simulate: ``(model_i, params_i) -> result`` (pure, traceable), e.g. a :class:`ControlScenario`.
        metrics: ``{name: f(result, model_i, params_i) -> scalar}`` (non-empty).
        num_samples: ``B >= 1``.
        seed: root seed (int).
        chunk_size: samples per compiled call (default: all, at most 4096); rounded up to a
            multiple of the number of devices; the last chunk is padded (padding discarded).
        devices: devices of the 1-D ``"batch"`` mesh (default ``jax.devices()``: every
            device of every process when ``jax.distributed`` is initialised).
        progress: show a tqdm progress bar over chunks.
        keep_draws: return every sampled draw (``(B, ...)`` arrays; True), none (False) or
            only those named in a list (e.g. leave out a large per-step noise
            ``"param/tau_noise"``); a name the study does not draw is refused.

    Returns:
        :class:`MonteCarloResults`.
    """
    num_samples = check_count("run_monte_carlo: num_samples", num_samples, 1)
    seed = check_count("run_monte_carlo: seed", seed, 0)
    check_type("run_monte_carlo: model", model, Model, "a sdjax.Model")
    check_type("run_monte_carlo: uncertainty", uncertainty, Uncertainty, "an Uncertainty")
    check_callable("run_monte_carlo: simulate", simulate, "(model_i, params_i) -> result")
    metrics = dict(metrics)
    if not metrics:
        raise ValueError("run_monte_carlo: give at least one metric")
    for name, fn in metrics.items():
        check_name("run_monte_carlo: metric name", name)
        check_callable(f"run_monte_carlo: metrics[{name!r}]", fn, "(result, model_i, params_i) -> scalar")
    uncertainty.check(model)
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("run_monte_carlo: devices is empty")
    num_devices = len(devices)
    chunk = min(num_samples, 4096) if chunk_size is None else check_count("run_monte_carlo: chunk_size", chunk_size, 1)
    chunk = min(chunk, num_samples)
    chunk = -(-chunk // num_devices) * num_devices
    num_chunks = -(-num_samples // chunk)

    root = jax.random.key(seed)
    if isinstance(keep_draws, (bool, np.bool_)):
        keep = lambda name: bool(keep_draws)  # noqa: E731
    else:
        if isinstance(keep_draws, (str, bytes)) or not hasattr(keep_draws, "__iter__"):
            raise TypeError(
                "run_monte_carlo: keep_draws: expected True, False or a list of draw names "
                f"(e.g. ['param/kp']), got {type(keep_draws).__name__} {keep_draws!r}"
            )
        keep_draws = [str(e) if isinstance(e, np.str_) else e for e in keep_draws]  # (dict keys, NumPy strings)
        for entry in keep_draws:
            if not isinstance(entry, str):
                raise TypeError(
                    f"run_monte_carlo: keep_draws: expected draw names, got {type(entry).__name__} {entry!r}"
                )
        _, _, drawn = jax.eval_shape(lambda key: uncertainty.sample(model, key, 0), root)
        unknown = sorted(set(keep_draws) - set(drawn))
        if unknown:
            raise ValueError(
                f"run_monte_carlo: keep_draws: unknown draw name(s) {unknown}; the study draws {sorted(drawn)}"
            )
        keep = set(keep_draws).__contains__

    def one(index):
        model_i, params_i, draws_i = uncertainty.sample(model, root, index)
        result = simulate(model_i, params_i)
        values = {name: jnp.asarray(fn(result, model_i, params_i)) for name, fn in metrics.items()}
        return values, {k: v for k, v in draws_i.items() if keep(k)}

    # Trace once, eagerly, so configuration errors surface here with their messages.
    shapes, _ = jax.eval_shape(one, jnp.zeros((), jnp.int32))
    for name, s in shapes.items():
        if s.shape != ():
            raise ValueError(f"run_monte_carlo: metric {name!r} must return a scalar per sample, got shape {s.shape}")

    mesh = Mesh(np.asarray(devices), ("batch",))
    sharding = NamedSharding(mesh, P("batch"))
    batched = jax.jit(jax.vmap(one), in_shardings=sharding, out_shardings=sharding)
    multiprocess = jax.process_count() > 1

    def indices(c: int) -> Array:
        idx = np.minimum(np.arange(c * chunk, (c + 1) * chunk), num_samples - 1).astype(np.int32)
        return jax.make_array_from_callback((chunk,), sharding, lambda where: idx[where])

    t0 = time.perf_counter()
    compiled = batched.lower(indices(0)).compile()
    compile_s = time.perf_counter() - t0

    metric_parts: dict[str, list] = {k: [] for k in metrics}
    draw_parts: dict[str, list] = {}
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(
            total=num_samples, desc="monte carlo", unit="sample", disable=multiprocess and jax.process_index() != 0
        )
    t1 = time.perf_counter()
    for c in range(num_chunks):
        out = compiled(indices(c))
        if multiprocess:
            from jax.experimental import multihost_utils

            out = multihost_utils.process_allgather(out, tiled=True)
        out = jax.device_get(out)
        valid = min(chunk, num_samples - c * chunk)
        values, draws = out
        for k, v in values.items():
            metric_parts[k].append(np.asarray(v)[:valid])
        for k, v in draws.items():
            draw_parts.setdefault(k, []).append(np.asarray(v)[:valid])
        if bar is not None:
            bar.update(valid)
    run_s = time.perf_counter() - t1
    if bar is not None:
        bar.close()
    steps = getattr(simulate, "num_steps", None)
    info = {
        "model": model.name,
        "dtype": str(np.dtype(model.dtype)),
        "chunk_size": chunk,
        "num_chunks": num_chunks,
        "num_devices": num_devices,
        "num_processes": jax.process_count(),
        "platform": devices[0].platform,
        "compile_s": compile_s,
        "run_s": run_s,
        "samples_per_s": num_samples / run_s if run_s > 0 else math.inf,
    }
    if isinstance(steps, (int, np.integer)):
        info["steps_per_sample"] = int(steps)
        info["steps_per_s"] = info["samples_per_s"] * int(steps)
    return MonteCarloResults(
        {k: np.concatenate(v) for k, v in metric_parts.items()},
        {k: np.concatenate(v) for k, v in draw_parts.items()},
        seed,
        num_samples,
        info,
    )


__all__ = [
    "ControlScenario",
    "Distribution",
    "Fixed",
    "InertiaRotation",
    "LogNormal",
    "MonteCarloResults",
    "Normal",
    "Offset",
    "Payload",
    "Perturbation",
    "Scale",
    "Sensitivity",
    "TruncatedNormal",
    "Uncertainty",
    "Uniform",
    "final_attitude_error",
    "final_base_drift",
    "final_joint_error",
    "manoeuvre_metrics",
    "peak_joint_torque",
    "run_monte_carlo",
    "samples_needed",
]
