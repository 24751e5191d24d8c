"""Optimal excitation: joint trajectories designed for inertial parameter identification.

An identification experiment is only as good as the motion it records: the estimate's
covariance is ``s^2 (Y_b^T Y_b)^-1`` with ``Y_b`` the regressor of the base parameters
(:class:`sdjax.identification.BaseParameters`) over the record, so the motion decides which
combinations are observable and how well. :func:`optimal_excitation` designs the motion by
gradient through the closed-loop rollout that produces the record:

- **Trajectory** (:class:`FourierExcitation`): each joint follows a finite Fourier series
  (Swevers, Ganseman, Tukel, De Schutter and Van Brussel 1997, "Optimal robot excitation and
  identification", IEEE Trans. Robotics and Automation 13(5)) times the window
  ``sin^2(pi t / T)``, so the experiment starts and ends at rest at ``q0``.
- **Record**: the joints track the trajectory under the PD law of
  :func:`sdjax.identification.tracking_record` while the base floats, RK4; the criterion is
  evaluated on the simulated record (what the experiment measures), not on the reference.
- **Criterion**: of the column-equilibrated base regressor ``Y_b`` (the structural base set,
  found first from random rich motions, :func:`sdjax.identification.base_parameters`), either
  A-optimality ``log(trace((Y_b^T Y_b)^-1) / r)`` (``"trace"``, default: the mean variance of
  the equilibrated base parameters, so the expected squared error of the estimate), D-optimality
  ``-log det(Y_b^T Y_b) / r`` (``"log_det"``: the volume of the confidence ellipsoid) or the log
  condition number ``log(s_max / s_min)`` (``"condition"``). Measured on four arms
  (``benchmarks/bench_excitation.py``), A-optimal designs shrank the base-parameter error more
  than D-optimal ones.
- **Limits**: joint excursion ``|q - q0| <= max_excursion`` (or absolute ``joint_limits``),
  rates ``|qd| <= rate_limit`` and torques ``|tau| <= torque_limit`` on the simulated record,
  as a quadratic penalty during the search and exactly at the end: a design that still
  leaves a limit is scaled down (all Fourier coefficients by one factor, found by a bracketing
  root search on re-simulated records) until every limit holds.
- **Optimiser**: L-BFGS with a strong Wolfe line search (:func:`sdjax.solvers.lbfgs`), inside one
  compiled program that evaluates the objective and its gradient (a rollout and its reverse
  pass) at one place per loop pass, so it is compiled once; the objective's history is
  returned.

Frames inertial, units SI, angles rad.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from sdjax.algebra import matmul
from sdjax._checks import check_choice, check_count, check_pair, check_scalar, check_type, float_array, renamed_keyword
from sdjax._compile import solver_jit
from sdjax.identification import (
    RESIDUALS,
    BaseParameters,
    Dataset,
    Unknowns,
    base_parameters,
    regressor,
    tracking_record,
)
from sdjax.model import Model, check_no_mimic
from sdjax.solvers import itp_root, lbfgs

__all__ = [
    "CRITERIA",
    "ExcitationDesign",
    "FourierExcitation",
    "base_singular_values",
    "excitation_criterion",
    "optimal_excitation",
    "random_excitation",
]

#: Design criteria of :func:`optimal_excitation` (module docstring).
CRITERIA = ("log_det", "trace", "condition")

# Weight of the squared relative limit violations in the design objective: a violation of 1 %
# over the whole record costs about as much as a 10 % loss of information, so the search
# stays near the limits and the final scaling (exact) changes the design little.
_PENALTY = 1e3


class FourierExcitation(eqx.Module):
    """Joint reference ``q(t) = q0 + w(t) f(t)`` for ``0 <= t <= T``, ``q0`` outside, with

        f(t) = sum_l a_l sin(l w_f t) + b_l cos(l w_f t),   w(t) = sin^2(pi t / T),

    so ``q``, ``qd`` are ``q0``, 0 at both ends. Callable as a reference of
    :class:`sdjax.JointPD`: ``t -> (q, qd, qdd)``.

    Attributes:
        q0: ``(n,)`` rest position, rad (m for prismatic joints).
        coefficients: ``(n, 2, L)`` the sine (``[:, 0]``) and cosine (``[:, 1]``)
            coefficients of harmonics ``1..L``, rad.
        duration: ``T``, s (static).
        base_frequency: ``w_f``, rad/s (static).
    """

    q0: Array
    coefficients: Array
    duration: float = eqx.field(static=True)
    base_frequency: float = eqx.field(static=True)

    def __init__(self, q0: Any, coefficients: Any, duration: float, base_frequency: float | None = None):
        self.q0 = float_array("FourierExcitation: q0", q0, shape=(None,))
        n = self.q0.shape[0]
        self.coefficients = float_array(
            "FourierExcitation: coefficients", coefficients, shape=(n, 2, None), dtype=self.q0.dtype
        )
        self.duration = check_scalar("FourierExcitation: duration", duration, sign="positive")
        frequency = 2 * math.pi / self.duration if base_frequency is None else base_frequency
        self.base_frequency = check_scalar("FourierExcitation: base_frequency", frequency, sign="positive")

    @property
    def harmonics(self) -> int:
        return int(self.coefficients.shape[-1])

    def __call__(self, t: Any) -> tuple[Array, Array, Array]:
        dtype = self.q0.dtype
        t = jnp.asarray(t, dtype)
        inside = (t >= 0) & (t <= self.duration)
        phase = jnp.pi * jnp.clip(t, 0.0, self.duration) / self.duration
        rate = jnp.pi / self.duration
        # Outside [0, T] the window and its derivatives are exactly 0 (rest at q0).
        w = jnp.where(inside, jnp.sin(phase) ** 2, 0.0)
        dw = jnp.where(inside, rate * jnp.sin(2 * phase), 0.0)
        ddw = jnp.where(inside, 2 * rate**2 * jnp.cos(2 * phase), 0.0)
        omega = self.base_frequency * jnp.arange(1, self.harmonics + 1, dtype=dtype)  # (L,)
        sin, cos = jnp.sin(omega * t), jnp.cos(omega * t)
        a, b = self.coefficients[:, 0], self.coefficients[:, 1]  # (n, L)
        f = matmul(a, sin) + matmul(b, cos)
        df = matmul(a, omega * cos) - matmul(b, omega * sin)
        ddf = -(matmul(a, omega**2 * sin) + matmul(b, omega**2 * cos))
        return self.q0 + w * f, dw * f + w * df, ddw * f + 2 * dw * df + w * ddf


def random_excitation(
    model: Model,
    q0: Any,
    duration: float,
    dt: float = 0.005,
    *,
    amplitude: float = 0.3,
    harmonics: int = 4,
    seed: int = 0,
    **tracking: Any,
) -> Dataset:
    """The record of a random Fourier excitation: coefficients drawn from
    ``numpy.random.default_rng(seed)`` (standard normal) and scaled so that each joint's
    largest excursion from ``q0`` on a fine time grid is ``amplitude`` rad. Several such
    records give the structural base parameters (:func:`sdjax.identification.base_parameters`).

    Arguments:
        model, q0, duration, dt: as :func:`sdjax.identification.tracking_record`.
        amplitude: largest joint excursion of the reference, rad.
        harmonics: ``L``.
        seed: random seed.
        **tracking: ``bandwidth``, ``damping_ratio``, ``base_twist`` of the tracking law.
    """
    check_scalar("random_excitation: amplitude", amplitude, sign="positive")
    harmonics = check_count("random_excitation: harmonics", harmonics, 1)
    raw = np.random.default_rng(seed).normal(size=(model.num_joints, 2, int(harmonics)))
    reference = _with_excursion(FourierExcitation(q0, raw, duration), amplitude)
    return tracking_record(model, reference.q0, reference, duration, dt, **tracking)


def _with_excursion(reference: FourierExcitation, excursion: Any) -> FourierExcitation:
    """``reference`` with each joint's coefficients scaled so that its largest ``|q - q0|`` on
    a grid of 401 times over ``[0, T]`` is ``excursion`` (scalar or ``(n,)``)."""
    q = np.asarray(jax.vmap(reference)(jnp.linspace(0.0, reference.duration, 401))[0])
    peak = np.max(np.abs(q - np.asarray(reference.q0)), axis=0)
    factor = np.broadcast_to(np.asarray(excursion, np.float64), peak.shape) / np.maximum(peak, 1e-12)
    return FourierExcitation(
        reference.q0, reference.coefficients * factor[:, None, None], reference.duration, reference.base_frequency
    )


def base_singular_values(
    model: Model, record: Dataset, unknowns: Unknowns, base: BaseParameters, **kwargs: Any
) -> Array:
    """``(r,)`` singular values (descending) of the base regressor of ``record``: the columns
    of :func:`sdjax.identification.regressor` that ``base`` keeps, each divided by its
    ``base.column_scale`` (fixed for all records, so values compare between records).
    ``kwargs``: residual options."""
    y = regressor(model, record, unknowns, **kwargs)
    independent = jnp.asarray(base.independent)
    y_base = y[:, independent] / jnp.asarray(base.column_scale, y.dtype)[independent]
    return jnp.linalg.svd(y_base, compute_uv=False)


def excitation_criterion(singular_values: Array, criterion: str = "trace") -> Array:
    """The design criterion (lower is better) of a base regressor's singular values:
    ``"log_det"``: ``-(2 / r) sum log s_i`` (D-optimality, per parameter); ``"trace"``:
    ``log((1 / r) sum s_i^-2)`` (A-optimality); ``"condition"``: ``log(s_max / s_min)``."""
    check_choice("excitation_criterion: criterion", criterion, CRITERIA, "criterion")
    s = jnp.asarray(singular_values)
    if criterion == "log_det":
        return -2.0 * jnp.mean(jnp.log(s))
    if criterion == "trace":
        return jnp.log(jnp.mean(s**-2))
    return jnp.log(jnp.max(s)) - jnp.log(jnp.min(s))


@dataclasses.dataclass(frozen=True)
class ExcitationDesign:
    """Result of :func:`optimal_excitation`.

    Attributes:
        reference: the designed :class:`FourierExcitation` (after the final scaling).
        record: its simulated, noise-free record (:class:`sdjax.identification.Dataset`,
            subsampled as the design saw it).
        base: the structural base parameters the criterion is about.
        criterion: the criterion's name.
        history: ``(iterations + 1,)`` objective (criterion + limit penalty) at the start and
            after each L-BFGS iteration.
        initial_singular_values, singular_values: ``(r,)`` base-regressor singular values of
            the starting design and of the final one (:func:`base_singular_values`).
        scale: the factor the optimised coefficients were multiplied by to meet every limit
            exactly (1 when the optimum already did).
        peaks: the largest relative use of each limit on the final record, ``{"excursion" or
            "joint_limits", "rate", "torque": value}`` (``<= 1`` when met; limits not set are
            absent).
        iterations: L-BFGS iterations run: the ones asked for, or fewer where a line search
            found no step that lowers the objective (at a minimum to round-off).
    """

    reference: FourierExcitation
    record: Dataset
    base: BaseParameters
    criterion: str
    history: np.ndarray
    initial_singular_values: np.ndarray
    singular_values: np.ndarray
    scale: float
    peaks: dict[str, float]
    iterations: int

    @property
    def condition_number(self) -> float:
        return float(self.singular_values[0] / self.singular_values[-1])

    @property
    def initial_condition_number(self) -> float:
        return float(self.initial_singular_values[0] / self.initial_singular_values[-1])


class _Design(eqx.Module):
    """The design problem as one pytree (model, limits, tracking law). The criterion's base
    set enters as ``selection``: ``(independent, column_scale)`` arrays of the base regressor's
    columns and their scales."""

    model: Model
    unknowns: Unknowns = eqx.field(static=True)
    q0: Array
    duration: float = eqx.field(static=True)
    dt: float = eqx.field(static=True)
    every: int = eqx.field(static=True)
    residual: str = eqx.field(static=True)
    criterion: str = eqx.field(static=True)
    lower: Array
    upper: Array
    rate_limit: Array
    torque_limit: Array
    tracking: tuple[tuple[str, Any], ...] = eqx.field(static=True)  # (name, value) pairs: hashable

    def record(self, coefficients: Array) -> Dataset:
        reference = FourierExcitation(self.q0, coefficients, self.duration)
        return tracking_record(self.model, self.q0, reference, self.duration, self.dt, **dict(self.tracking))

    def usage(self, record: Dataset) -> dict[str, Array]:
        """Relative use of each limit per sample (``<= 1`` inside): ``(N, n)`` arrays."""
        q, qd = record.states.q, record.states.qd
        middle, half = 0.5 * (self.upper + self.lower), 0.5 * (self.upper - self.lower)
        out = {"position": jnp.abs(q - middle) / half, "rate": jnp.abs(qd) / self.rate_limit}
        if record.torques is not None:
            out["torque"] = jnp.abs(record.torques) / self.torque_limit
        return out

    def singular_values(self, selection: tuple[Array, Array], record: Dataset) -> Array:
        independent, column_scale = selection
        y = regressor(self.model, record.subsample(self.every), self.unknowns, residual=self.residual)
        return jnp.linalg.svd(y[:, independent] / column_scale, compute_uv=False)

    def objective(self, selection: tuple[Array, Array], coefficients: Array) -> Array:
        record = self.record(coefficients)
        value = excitation_criterion(self.singular_values(selection, record), self.criterion)
        penalty = sum(jnp.mean(jnp.sum(jax.nn.relu(u - 1.0) ** 2, axis=-1)) for u in self.usage(record).values())
        return value + _PENALTY * penalty


def optimal_excitation(
    model: Model,
    unknowns: Unknowns,
    q0: Any,
    duration: float,
    dt: float = 0.005,
    *,
    residual: str = "momentum",
    criterion: str = "trace",
    harmonics: int = 4,
    max_excursion: Any = 0.3,
    joint_limits: tuple[Any, Any] | None = None,
    rate_limit: Any = 1.0,
    torque_limit: Any = None,
    sample_every: int = 4,
    max_iterations: int = 60,
    structural_records: int = 3,
    seed: int = 0,
    bandwidth: float = 5.0,
    damping_ratio: float = 0.7,
    base_twist: Any = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0),
    iterations: int | None = None,
) -> ExcitationDesign:
    """Design an excitation experiment for the ``unknowns`` of ``model`` (module docstring).

    Arguments:
        model: the nominal model (the design simulates it; the regressor does not depend on
            the parameters, only on the motion).
        unknowns: the parameters to identify (:class:`sdjax.identification.Unknowns`).
        q0: ``(n,)`` rest position the experiment starts and ends at.
        duration: experiment length ``T``, s; ``dt`` the RK4 step.
        residual: ``"momentum"``, ``"dynamics"`` or ``"both"`` (the identification's).
        criterion: ``"log_det"``, ``"trace"`` or ``"condition"`` (:data:`CRITERIA`).
        harmonics: Fourier harmonics ``L`` per joint (base frequency ``2 pi / T``).
        max_excursion: scalar or ``(n,)`` largest ``|q - q0|``, rad (used when
            ``joint_limits`` is ``None``).
        joint_limits: ``(lower, upper)`` absolute joint limits (``(n,)`` each, containing
            ``q0``) instead of ``max_excursion``.
        rate_limit: scalar or ``(n,)`` largest ``|qd|``, rad/s.
        torque_limit: scalar or ``(n,)`` largest ``|tau|``, N m, or ``None`` (none).
        sample_every: the record is subsampled by this factor for the regressor (the rate an
            experiment would log at).
        max_iterations: most L-BFGS iterations.
        structural_records: random designs (normal coefficients, scaled to the full
            excursion and then into every limit) whose records give the structural base set.
        seed: seed of the starting design and the structural records (drawn in that order).
        bandwidth, damping_ratio, base_twist: the tracking law and the base's initial twist
            (:func:`sdjax.identification.tracking_record`).
        iterations: the earlier name of ``max_iterations`` (``DeprecationWarning``).

    Returns:
        :class:`ExcitationDesign`.
    """
    check_no_mimic(model, "optimal_excitation")
    check_choice("optimal_excitation: residual", residual, RESIDUALS, "residual")
    check_choice("optimal_excitation: criterion", criterion, CRITERIA, "criterion")
    check_type("optimal_excitation: unknowns", unknowns, Unknowns, "an Unknowns")
    unknowns.check(model)
    iterations = renamed_keyword("optimal_excitation", "iterations", iterations, "max_iterations", max_iterations, 60)
    n = model.num_joints
    q0 = float_array("optimal_excitation: q0", q0, shape=(n,), hint="one per joint")
    dtype = q0.dtype
    for name, value, lowest in (
        ("harmonics", harmonics, 1),
        ("sample_every", sample_every, 1),
        ("max_iterations", iterations, 1),
        ("structural_records", structural_records, 1),
    ):
        check_count(f"optimal_excitation: {name}", value, lowest)
    if not (duration > 0 and dt > 0) or round(duration / dt) // sample_every < 1:
        raise ValueError(
            f"optimal_excitation: duration {duration} s at dt {dt} s gives fewer than 2 samples every "
            f"sample_every = {sample_every} steps"
        )
    if joint_limits is None:
        excursion = float_array(
            "optimal_excitation: max_excursion",
            max_excursion,
            shape=(n,),
            dtype=dtype,
            scalar="broadcast",
            sign="positive",
        )
        lower, upper = q0 - excursion, q0 + excursion
        position_name = "excursion"
    else:
        pair = check_pair("optimal_excitation: joint_limits", joint_limits, "(lower, upper) pair of (n,) arrays")
        lower, upper = (
            float_array(f"optimal_excitation: joint_limits {side}", v, shape=(n,), dtype=dtype, scalar="broadcast")
            for side, v in zip(("lower", "upper"), pair)
        )
        outside = np.nonzero(~((np.asarray(lower) < np.asarray(q0)) & (np.asarray(q0) < np.asarray(upper))))[0]
        if outside.size:
            raise ValueError(f"optimal_excitation: q0 not strictly inside joint_limits for joint(s) {outside.tolist()}")
        excursion = jnp.minimum(q0 - lower, upper - q0)
        position_name = "joint_limits"
    rates = float_array(
        "optimal_excitation: rate_limit", rate_limit, shape=(n,), dtype=dtype, scalar="broadcast", sign="positive"
    )
    torques = (
        jnp.full((n,), jnp.inf, dtype)
        if torque_limit is None
        else float_array(
            "optimal_excitation: torque_limit",
            torque_limit,
            shape=(n,),
            dtype=dtype,
            scalar="broadcast",
            sign="positive",
        )
    )
    tracking = dict(
        bandwidth=float(bandwidth), damping_ratio=float(damping_ratio), base_twist=tuple(map(float, base_twist))
    )

    design = _Design(
        model=model,
        unknowns=unknowns,
        q0=q0,
        duration=float(duration),
        dt=float(dt),
        every=int(sample_every),
        residual=residual,
        criterion=criterion,
        lower=lower,
        upper=upper,
        rate_limit=rates,
        torque_limit=torques,
        tracking=tuple(tracking.items()),
    )
    rng = np.random.default_rng(seed)

    def random_design() -> Array:
        """Random coefficients at the full excursion, scaled into every limit."""
        reference = _with_excursion(FourierExcitation(q0, rng.normal(size=(n, 2, harmonics)), duration), excursion)
        return _within_limits(design, reference.coefficients)[0]

    # 1. The structural base set, from random records within the limits.
    coefficients = random_design()  # the starting design
    records = [design.record(random_design()).subsample(sample_every) for _ in range(structural_records)]
    base = base_parameters(model, records, unknowns, residual=residual)
    selection = (jnp.asarray(base.independent), jnp.asarray(base.column_scale[base.independent], dtype))

    # 2. L-BFGS from the starting design.
    initial_sv = np.asarray(_singular_values(design, selection, coefficients))
    coefficients, history, steps = _minimize(design, selection, coefficients, iterations)
    history = np.asarray(history)[: int(steps) + 1]

    # 3. Exact limits (the penalty leaves the optimum slightly outside them).
    coefficients, scale = _within_limits(design, coefficients)
    record = design.record(coefficients)
    usage = {k: float(np.max(np.asarray(v))) for k, v in design.usage(record).items()}
    peaks = {position_name: usage["position"], "rate": usage["rate"]}
    if torque_limit is not None:
        peaks["torque"] = usage["torque"]
    return ExcitationDesign(
        reference=FourierExcitation(q0, coefficients, duration),
        record=record.subsample(sample_every),
        base=base,
        criterion=criterion,
        history=history,
        initial_singular_values=initial_sv,
        singular_values=np.asarray(_singular_values(design, selection, coefficients)),
        scale=scale,
        peaks=peaks,
        iterations=int(steps),
    )


@eqx.filter_jit
def _singular_values(design: _Design, selection: tuple[Array, Array], coefficients: Array) -> Array:
    return design.singular_values(selection, design.record(coefficients))


@eqx.filter_jit
def _usage_peak(design: _Design, coefficients: Array) -> Array:
    return jnp.max(jnp.stack([jnp.max(u) for u in design.usage(design.record(coefficients)).values()]))


#: Width of the bracket on the scale factor at which :func:`_within_limits` stops (2^-30, the
#: resolution of thirty bisection steps on ``[0, 1]``).
SCALE_TOLERANCE = 2.0**-30


def _within_limits(design: _Design, coefficients: Array) -> tuple[Array, float]:
    """``coefficients`` scaled down by the largest factor ``<= 1`` (to :data:`SCALE_TOLERANCE`)
    whose simulated record keeps every limit, and the factor: the root of ``g(s) = peak usage(s)
    - 1`` on the bracket ``[0, 1]`` (``g(0) <= 0`` at rest, ``g(1) > 0``) by :func:`sdjax.solvers.itp_root`."""

    def excess(scale: float) -> float:
        return float(_usage_peak(design, scale * coefficients)) - 1.0

    g_high = excess(1.0)
    if g_high <= 0.0:
        return coefficients, 1.0
    g_low = excess(0.0)
    low = 0.0 if g_low > 0.0 else itp_root(excess, 0.0, 1.0, g_low, g_high, SCALE_TOLERANCE)
    if low == 0.0:  # the rest record, or even a motion SCALE_TOLERANCE of the size, leaves a limit
        raise ValueError(
            "optimal_excitation: the limits cannot be met by any motion from q0 (at rest, with the given "
            "base_twist, or with the smallest motion the record leaves a limit); loosen the limits or start "
            "elsewhere"
        )
    return low * coefficients, low


def _lbfgs(
    design: _Design, selection: tuple[Array, Array], coefficients: Array, iterations: int
) -> tuple[Array, Array, Array]:
    """``iterations`` L-BFGS steps on ``design.objective``: the coefficients, the objective at the
    start and after each step (NaN past an early stop), and the steps taken."""
    value_and_grad = jax.value_and_grad(lambda x: design.objective(selection, x))
    result = lbfgs(value_and_grad, coefficients, max_iterations=iterations)
    return result.x, result.history, result.iterations


_minimize = solver_jit(_lbfgs)
