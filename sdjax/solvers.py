"""Damped least squares, the Gauss-Newton / Levenberg-Marquardt iteration, L-BFGS and a
bracketed scalar root.

The numerical building blocks that resolved motion rate control and inverse kinematics
(:mod:`sdjax.control`), plan refinement (:mod:`sdjax.planning`) and inertial parameter
identification (:mod:`sdjax.identification`) share.

Damped least squares. For a Jacobian ``J`` ``(m, n)``, a right-hand side ``b`` ``(m,)``, a
damping ``mu >= 0`` and a positive diagonal ``D = diag(d)`` (default the identity),
:func:`damped_solve` returns

    x = argmin |J x - b|^2 + mu x^T D x

in one of two equivalent forms (Levenberg 1944; Marquardt 1963; Nocedal and Wright,
*Numerical Optimization*, 2nd ed. 2006, section 10.3):

- normal equations, an ``n x n`` system: ``(J^T J + mu D) x = J^T b``;
- minimum norm, an ``m x m`` system: ``x = D^-1 J^T (J D^-1 J^T + mu E)^-1 b``.

For ``mu > 0`` they are the same vector (the push-through identity
``(J^T J + mu D)^-1 J^T = D^-1 J^T (J D^-1 J^T + mu E)^-1``); the smaller system is the
cheaper one. At ``mu = 0`` the normal form is the least-squares solution of a ``J`` of full
column rank and the minimum-norm form the minimum-norm solution ``J^+ b`` of a ``J`` of full
row rank. Along a singular direction of ``J`` (``D = E``) with singular value ``sigma`` the
damped solution scales the component of ``b`` by ``sigma / (sigma^2 + mu) <= 1 / (2 sqrt(mu))``
instead of ``1 / sigma``: damping bounds the solution where ``J`` loses rank.

:func:`damped_least_squares` (the resolved motion rate inverse ``J^#``) chooses ``mu =
lambda^2`` from the smallest singular value of ``J`` (Nakamura and Hanafusa 1986;
Maciejewski and Klein 1988; Chiaverini 1997): zero away from singularities, so the answer is
the exact (pseudo-)inverse there, growing to ``lambda_max^2`` at a singularity.

Levenberg-Marquardt. :func:`levenberg_marquardt` minimises ``1/2 |r(x)|^2`` by steps
``dx = argmin |J dx + r|^2 + mu dx^T D dx`` (``J = dr/dx`` by forward-mode differentiation)
in a ``lax.while_loop``, so it runs inside ``jit``:

- step rule: :func:`damped_solve` in either form, optionally scaled so that no entry of ``dx``
  exceeds ``max_step`` (:func:`limit_step`) and projected onto a feasible set;
- damping: fixed (``adaptive=False``: the damped Gauss-Newton method, every step taken) or
  Marquardt's rule (``adaptive=True``): a step is accepted when the cost does not increase,
  else ``mu`` is multiplied by 10 and the step recomputed; after an accepted step ``mu`` is
  divided by 10, down to a floor (Marquardt 1963);
- scaling: ``D = E`` or Marquardt's ``D = diag(J^T J)`` (:func:`marquardt_scaling`), which
  makes the steps invariant to the units of the unknowns (Marquardt 1963; Nocedal and Wright
  10.3);
- stopping: a residual tolerance ``max |r| <= tolerance`` checked before each step, a step
  tolerance ``|dx| < step_tolerance (1 + |x|)`` after each accepted step, no acceptable
  damping within ``max_tries``, or ``max_iterations`` accepted steps;
- history: the cost ``1/2 |r|^2`` and ``max |r|`` at the start and after every accepted step.

L-BFGS. :func:`lbfgs` minimises a smooth scalar ``f(x)`` by limited-memory BFGS steps
``x + t d``, ``d = -H_k g`` from the two-loop recursion over the last ``memory`` pairs
``(s, y)`` (Nocedal and Wright, algorithm 7.4), with a line search for the strong Wolfe
conditions: sufficient decrease ``f(x + t d) <= f(x) + c1 t g.d`` and a flat enough slope
``|g(x + t d).d| <= c2 |g.d|`` (algorithms 3.5 and 3.6: the trial step doubles from 1 until a
bracket is found, then the bracket shrinks to the minimiser of the cubic through its ends'
values and slopes, eq 3.59, safeguarded). Every pass of its ``lax.while_loop`` evaluates ``f``
and its gradient once, at one trial step (the search's phases are states of the loop, not
nested loops or branches that each call ``f``), so a compiled minimisation holds one copy of
``value_and_grad``; where ``f`` is a rollout and its reverse pass, compiling that copy is most
of the cost. The curvature condition makes every stored pair satisfy ``s.y > 0``, so ``H_k``
stays positive definite; the first step, and any step after a direction that does not descend,
is along ``-g / |g|``.

A bracketed scalar root. :func:`itp_root` shrinks a bracket ``[low, high]`` of a sign change of
``g`` by the ITP method (Oliveira and Takahashi 2020; ``kappa_1 = 0.2 / (high - low)``,
``kappa_2 = 2``, ``n_0 = 2``): regula falsi steps, truncated and projected into a shrinking
interval around the midpoint, so it needs at most two evaluations of ``g`` more than bisection,
and a few where ``g`` is smooth (6-9 on smooth test functions; with ``n_0 = 1`` a first step
that shrank the bracket less than bisection used up the slack and the rest was bisection). The
excitation design's final scaling uses it, where each evaluation is a simulated record.

The damped systems are solved by LU with partial pivoting (``jnp.linalg.solve``), which
still returns a finite answer where the damped matrix is singular to working precision (the
undamped normal equations of a rank-deficient ``J``, as in identification with unobservable
parameters); the Levenberg-Marquardt acceptance test then rejects a useless step.

References:

- K. Levenberg, "A method for the solution of certain non-linear problems in least squares",
  Quarterly of Applied Mathematics 2(2), 164-168, 1944.
- D. W. Marquardt, "An algorithm for least-squares estimation of nonlinear parameters",
  Journal of the Society for Industrial and Applied Mathematics 11(2), 431-441, 1963.
- J. Nocedal and S. J. Wright, *Numerical Optimization*, 2nd ed., Springer 2006, chapters 3
  (line searches), 7 (L-BFGS) and 10.
- I. F. D. Oliveira and R. H. C. Takahashi, "An enhancement of the bisection method average
  performance preserving minmax optimality", ACM Transactions on Mathematical Software 47(1),
  5:1-5:24, 2020.
- Y. Nakamura and H. Hanafusa, "Inverse kinematic solutions with singularity robustness for
  robot manipulator control", J. Dynamic Systems, Measurement, and Control 108(3), 163-171,
  1986.
- A. A. Maciejewski and C. A. Klein, "Numerical filtering for the operation of robotic
  manipulators through kinematically singular configurations", J. Robotic Systems 5(6),
  527-552, 1988.
- S. Chiaverini, "Singularity-robust task-priority redundancy resolution for real-time
  kinematic control of robot manipulators", IEEE Trans. Robotics and Automation 13(3),
  398-410, 1997.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from sdjax.algebra import matmul
from sdjax._checks import check_choice, check_count, check_vector, float_array, is_traced

#: Forms of the damped system solved by :func:`damped_solve`: ``"auto"`` (the smaller of the
#: two: minimum norm when ``m <= n``), ``"min_norm"`` (``m x m``) or ``"normal"`` (``n x n``).
FORMS = ("auto", "min_norm", "normal")

#: Default singular-value threshold ``eps`` of :func:`damped_least_squares`: damping switches on
#: when the smallest singular value of the (weighted) task Jacobian drops below it (units of the
#: Jacobian: m/rad for linear rows, dimensionless for angular rows). A 1-3 m arm has singular
#: values of order 1, so 0.05 damps only close to a singularity.
DEFAULT_SINGULAR_THRESHOLD = 0.05

#: Default largest damping ``lambda_max`` of :func:`damped_least_squares`, reached at a
#: singularity: it bounds joint rates by 1/(2 * 0.05) = 10 rad/s per unit task speed there.
DEFAULT_MAX_DAMPING = 0.05


# ------------------------------------------------------------------------------------------
# Damped linear least squares.


def damped_solve(
    jacobian: Array, rhs: Array, damping: Any, *, diagonal: Array | None = None, form: str = "auto"
) -> Array:
    """Damped least-squares solution ``x = argmin |J x - b|^2 + mu x^T diag(d) x``.

    Traceable (no checks on values); see the module docstring for the two forms.

    Arguments:
        jacobian: ``(m, n)`` matrix ``J``.
        rhs: ``(m,)`` right-hand side ``b``.
        damping: ``()`` ``mu >= 0`` (units of ``J^2`` over those of ``d``).
        diagonal: optional ``(n,)`` positive ``d`` (default ones).
        form: ``"auto"``, ``"min_norm"`` or ``"normal"`` (:data:`FORMS`); static.

    Returns:
        ``(n,)`` solution ``x``.
    """
    check_choice("damped_solve: form", form, FORMS)
    m, n = jacobian.shape
    if form == "min_norm" or (form == "auto" and m <= n):
        # x = D^-1 J^T (J D^-1 J^T + mu E)^-1 b: an m x m system.
        scaled = jacobian.T if diagonal is None else jacobian.T / diagonal[:, None]
        gram = matmul(jacobian, scaled)
        return matmul(scaled, jnp.linalg.solve(gram + damping * jnp.eye(m, dtype=gram.dtype), rhs))
    # (J^T J + mu D) x = J^T b: an n x n system.
    gram = matmul(jacobian.T, jacobian)
    penalty = jnp.eye(n, dtype=gram.dtype) if diagonal is None else jnp.diag(diagonal)
    return jnp.linalg.solve(gram + damping * penalty, matmul(jacobian.T, rhs))


def marquardt_scaling(jacobian: Array) -> Array:
    """Marquardt's diagonal scaling ``d = diag(J^T J)`` for :func:`damped_solve`.

    With ``D = diag(J^T J)`` the damped step does not depend on the units of the unknowns
    (Marquardt 1963). A zero column of ``J`` (an unknown the residual does not see) would give
    ``d_j = 0`` and an unbounded step along it, so every entry is raised by
    ``eps (1 + max d)``, ``eps`` the machine epsilon of the dtype: negligible next to every
    non-zero column, enough to keep ``D`` positive definite.

    Arguments:
        jacobian: ``(m, n)`` matrix ``J``.

    Returns:
        ``(n,)`` positive diagonal ``d``.
    """
    diag = jnp.diag(matmul(jacobian.T, jacobian))
    return diag + jnp.finfo(jacobian.dtype).eps * (1.0 + jnp.max(diag))


def limit_step(step: Array, max_step: Any) -> Array:
    """``step`` scaled (direction kept) so that no entry exceeds ``max_step`` in magnitude.

    A trust region in the infinity norm for a Newton-type step: far from a solution the
    linearisation is poor, and a long step can leave the region where it holds (or, for
    joint angles, wrap around).

    Arguments:
        step: any shape.
        max_step: ``()`` positive bound, units of ``step``.

    Returns:
        ``step * min(1, max_step / max |step_i|)``, same shape (zero stays zero).
    """
    biggest = jnp.max(jnp.abs(step))
    return step * jnp.minimum(1.0, max_step / jnp.where(biggest > 0, biggest, 1.0))


def equilibrated_lstsq(matrix: Any, rhs: Any, rcond: float = 1e-10) -> np.ndarray:
    """Least-squares solution of ``A x = b`` with the columns of ``A`` scaled to unit norm.

    ``x = S^-1 lstsq(A S^-1, b)``, ``S = diag(|a_j|)`` (zero columns unscaled): column
    equilibration makes the relative singular-value cut ``rcond`` of the truncated-SVD solve
    (``np.linalg.lstsq``) independent of the units of the unknowns; among the solutions it
    returns the one of minimum norm in the scaled coordinates ``S x``. NumPy, on the host (for
    one-off solves outside ``jit``), in the precision of the inputs.

    Arguments:
        matrix: ``(m, n)`` ``A``.
        rhs: ``(m,)`` ``b``.
        rcond: singular values below ``rcond`` times the largest (of ``A S^-1``) count as zero.

    Returns:
        ``(n,)`` NumPy array ``x``.
    """
    matrix, rhs = np.asarray(matrix), np.asarray(rhs)
    norms = np.linalg.norm(matrix, axis=0)
    scale = np.where(norms > 0, norms, 1.0)
    return np.linalg.lstsq(matrix / scale, rhs, rcond=rcond)[0] / scale


# ------------------------------------------------------------------------------------------
# Damped least squares with a singular-value damping schedule (resolved motion rates).


class DampedLeastSquares(eqx.Module):
    """Result of :func:`damped_least_squares`.

    Attributes:
        solution: ``(n,)`` ``x`` minimising ``|W^1/2 (J x - b)|^2 + lambda^2 |x|^2``.
        damping: ``()`` ``lambda`` used (0 away from singularities).
        min_singular_value: ``()`` smallest singular value of ``W^1/2 J``.
    """

    solution: Array
    damping: Array
    min_singular_value: Array


def damped_least_squares(
    jacobian: Any,
    rhs: Any,
    *,
    singular_threshold: Any = DEFAULT_SINGULAR_THRESHOLD,
    max_damping: Any = DEFAULT_MAX_DAMPING,
    weights: Any = None,
) -> DampedLeastSquares:
    """Damped least-squares (Levenberg-Marquardt) solution of ``J x = b`` with a damping
    that switches on near singularities (Nakamura and Hanafusa 1986; Maciejewski and Klein
    1988; Chiaverini's schedule):

        x = J^T (J J^T + lambda^2 E)^-1 b,
        lambda^2 = lambda_max^2 (1 - (sigma_min / eps)^2)  if sigma_min < eps, else 0,

    ``sigma_min`` the smallest singular value of ``J`` (from the eigenvalues of ``J J^T``).
    Away from singularities (``sigma_min >= eps``) this is the exact minimum-norm solution
    ``J^+ b``; near one, each singular direction is scaled by ``sigma / (sigma^2 + lambda^2)
    <= 1 / (2 lambda)``, so ``|x| <= |b| / (2 lambda)`` stays bounded where ``J^+`` blows up.
    For ``m > n`` rows the normal equations ``(J^T J + lambda^2 E) x = J^T b`` are solved.

    Arguments:
        jacobian: ``(m, n)`` matrix ``J``.
        rhs: ``(m,)`` right-hand side ``b``.
        singular_threshold: ``eps >= 0`` (units of ``J``).
        max_damping: ``lambda_max >= 0``. With ``eps = 0`` or ``lambda_max = 0`` this is the
            undamped pseudo-inverse (which fails at a singularity).
        weights: optional ``(m,)`` positive task-row weights ``W`` (e.g. to trade position
            against orientation accuracy); the schedule uses ``W^1/2 J``.

    Returns:
        :class:`DampedLeastSquares`.
    """
    jac = jnp.asarray(jacobian)
    if jac.ndim != 2:
        raise ValueError(f"damped_least_squares: jacobian expected shape (m, n), got {jac.shape}")
    m = jac.shape[0]
    b = check_vector("damped_least_squares: rhs", rhs, (m,), jac.dtype)
    check_damping("damped_least_squares", singular_threshold, max_damping)
    if weights is not None:
        weights = check_vector("damped_least_squares: weights", weights, (m,), jac.dtype)
        float_array("damped_least_squares: weights", weights, sign="positive")
    return solve_damped_least_squares(jac, b, singular_threshold, max_damping, weights)


# Building blocks shared with :mod:`sdjax.control` and :mod:`sdjax.massless_arm` (public names,
# not in ``__all__``).


def check_damping(name: str, singular_threshold: Any, max_damping: Any) -> None:
    """``ValueError`` naming ``name`` unless both schedule parameters of
    :func:`damped_least_squares` are finite non-negative scalars (traced values pass)."""
    for label, value in (("singular_threshold", singular_threshold), ("max_damping", max_damping)):
        if not is_traced(value):
            arr = np.asarray(value, np.float64)
            if arr.shape != () or not arr >= 0 or not np.isfinite(arr):
                raise ValueError(f"{name}: {label} must be a finite non-negative scalar, got {value!r}")


@eqx.filter_jit
def solve_damped_least_squares(
    jac: Array, b: Array, singular_threshold: Any, max_damping: Any, weights: Array | None
) -> DampedLeastSquares:
    """:func:`damped_least_squares` without the argument checks (traceable): ``jac (m, n)``,
    ``b (m,)``, ``weights (m,)`` or ``None``."""
    m, n = jac.shape
    if weights is not None:
        root = jnp.sqrt(weights)
        jac, b = root[:, None] * jac, root * b
    wide = m <= n
    gram = matmul(jac, jac.T) if wide else matmul(jac.T, jac)
    # The smallest eigenvalue of the Gram matrix is sigma_min^2; symmetrised so that eigvalsh
    # reads a symmetric matrix (the product is symmetric only up to round-off).
    sigma_sq = jnp.maximum(jnp.linalg.eigvalsh(0.5 * (gram + gram.T))[0], 0.0)
    eps = jnp.asarray(singular_threshold).astype(jac.dtype)
    lam_max = jnp.asarray(max_damping).astype(jac.dtype)
    near = sigma_sq < eps**2
    ratio = sigma_sq / jnp.where(near, eps**2, 1.0)
    lam_sq = jnp.where(near, lam_max**2 * (1.0 - ratio), 0.0)
    x = damped_solve(jac, b, lam_sq, form="min_norm" if wide else "normal")
    return DampedLeastSquares(solution=x, damping=_safe_sqrt(lam_sq), min_singular_value=_safe_sqrt(sigma_sq))


def _safe_sqrt(value: Array) -> Array:
    """``sqrt(value)`` for ``value >= 0`` with a zero (not infinite) gradient at 0."""
    positive = value > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, value, 1.0)), 0.0)


# ------------------------------------------------------------------------------------------
# Nonlinear least squares: Gauss-Newton / Levenberg-Marquardt.


class LeastSquaresResult(eqx.Module):
    """Result of :func:`levenberg_marquardt` (``I = max_iterations``, ``m`` residuals).

    Attributes:
        x: the final iterate, shape of ``x0``.
        residual: ``(m,)`` ``r(x)``.
        cost: ``()`` ``1/2 |r(x)|^2``.
        iterations: ``()`` int32 accepted steps.
        damping: ``()`` damping ``mu`` the next step would start from.
        converged: ``()`` bool, stopped by ``tolerance`` or ``step_tolerance`` (not by
            ``max_iterations`` or by a failed damping search).
        cost_history: ``(I + 1,)`` ``1/2 |r|^2`` at ``x0`` and after each accepted step; NaN
            past the stop (``cost_history[:iterations + 1]`` are the values).
        residual_history: ``(I + 1,)`` ``max |r|``, same rows.
        aux: with ``has_aux``, the auxiliary output of ``residual`` at ``x``; else ``None``.
    """

    x: Array
    residual: Array
    cost: Array
    iterations: Array
    damping: Array
    converged: Array
    cost_history: Array
    residual_history: Array
    aux: Any = None


def levenberg_marquardt(
    residual: Callable[[Array], Array],
    x0: Array,
    *,
    max_iterations: int,
    damping: Any,
    adaptive: bool = True,
    scaling: str = "identity",
    form: str = "auto",
    max_step: Any = None,
    project: Callable[[Array], Array] | None = None,
    tolerance: Any = None,
    step_tolerance: Any = None,
    damping_factor: float = 10.0,
    min_damping: float = 1e-12,
    max_tries: int = 30,
    has_aux: bool = False,
    iteration_limit: Any = None,
) -> LeastSquaresResult:
    """Minimise ``1/2 |r(x)|^2`` by damped Gauss-Newton / Levenberg-Marquardt steps.

    One ``lax.while_loop`` (traceable inside ``jit``, forward-mode differentiable; reverse mode
    does not pass a ``while_loop``). Each iteration forms ``J = dr/dx`` by ``jax.jacfwd`` (one
    batched tangent pass: cheap for tens of unknowns, and it compiles far faster than a
    reverse pass through a long rollout), then tries

        dx = damped_solve(J, -r, mu, diagonal=D, form=form)   (then limit_step, x + dx, project)

    With ``adaptive=False`` that step is always taken and ``mu`` stays ``damping`` (damped
    Gauss-Newton). With ``adaptive=True`` the step is taken when the new cost is finite and not
    larger than the current one; otherwise ``mu`` is multiplied by ``damping_factor`` and the
    step recomputed from the same ``J``, at most ``max_tries`` times (then the iteration stops
    at the current ``x``). After an accepted step ``mu`` is divided by ``damping_factor``,
    floored at ``min_damping`` (Marquardt 1963).

    The iteration stops before a step when ``max |r| <= tolerance``, after an accepted step
    when ``|dx| < step_tolerance (1 + |x|)`` (``dx`` the limited step, before the projection),
    when the damping search fails, or after ``max_iterations`` accepted steps.

    With ``adaptive=False`` the residual is evaluated in one place only, ``jacfwd`` at the
    current iterate, which yields the residual too (and ``aux``): one copy of a costly residual
    (a rollout) in the compiled program instead of three, at the price of one Jacobian at the
    final iterate whose step is not taken (measured on the planning problems: 2-3x shorter
    compilation, a few per cent more run time).

    Arguments:
        residual: ``x -> (m,)`` residual vector, traceable.
        x0: initial unknowns, any shape (flattened for the linear algebra).
        max_iterations: static int >= 0, most accepted steps.
        damping: ``()`` ``mu >= 0``: fixed, or the initial value when ``adaptive``.
        adaptive: static; Marquardt's damping adaptation with a cost-decrease test.
        scaling: static ``"identity"`` (``D = E``) or ``"marquardt"`` (``D = diag(J^T J)``,
            :func:`marquardt_scaling`).
        form: static form of the damped system (:data:`FORMS`).
        max_step: optional ``()`` bound on every entry of a step (:func:`limit_step`).
        project: optional ``x -> x`` applied after each step (e.g. clipping to bounds).
        tolerance: optional ``()`` residual tolerance, units of ``r`` (``0``: stop only on an
            exactly zero residual).
        step_tolerance: optional ``()`` relative step tolerance.
        damping_factor, min_damping, max_tries: static constants of the adaptive rule.
        has_aux: static; ``residual`` returns ``(r, aux)`` (any pytree ``aux``, e.g. the
            rollout behind the residual), reported at the final iterate as ``result.aux``.
        iteration_limit: optional ``()`` int, most accepted steps as data (may be traced):
            one compiled program then serves every limit up to ``max_iterations``, which
            stays the static length of the histories.

    Returns:
        :class:`LeastSquaresResult`.
    """
    max_iterations = check_count("levenberg_marquardt: max_iterations", max_iterations, 0)
    check_choice("levenberg_marquardt: scaling", scaling, ("identity", "marquardt"))
    check_choice("levenberg_marquardt: form", form, FORMS)
    x0 = jnp.asarray(x0)
    dtype = x0.dtype

    def evaluate(x: Array) -> tuple[Array, Any]:
        """``(r(x), aux)`` (``aux`` None without ``has_aux``)."""
        out: Any = residual(x)
        return out if has_aux else (out, None)

    def measures(r: Array) -> tuple[Array, Array]:
        return 0.5 * jnp.sum(r**2), jnp.max(jnp.abs(r))

    def step_from(x: Array, jac: Array, r: Array, diagonal: Array | None, mu: Array) -> tuple[Array, Array]:
        """``(x_new, |dx|)`` of the step with damping ``mu``."""
        dx = damped_solve(jac, -r, mu, diagonal=diagonal, form=form)
        if max_step is not None:
            dx = limit_step(dx, max_step)
        x_new = x + dx.reshape(x.shape)
        if project is not None:
            x_new = project(x_new)
        return x_new, jnp.linalg.norm(dx)

    def is_small(length: Array, x_new: Array) -> Array:
        if step_tolerance is None:
            return jnp.zeros((), bool)
        return length < step_tolerance * (1.0 + jnp.linalg.norm(x_new))

    r_shape, aux_shape = jax.eval_shape(evaluate, x0)
    nan = jnp.full((max_iterations + 1,), jnp.nan, r_shape.dtype)
    mu0 = jnp.asarray(damping, dtype)
    limit = max_iterations if iteration_limit is None else jnp.minimum(iteration_limit, max_iterations)

    def damped_gauss_newton() -> LeastSquaresResult:
        """The fixed-damping iteration of :func:`levenberg_marquardt`, with one evaluation site.

        Each pass of the loop forms ``r``, ``J`` (and ``aux``) at the current iterate by one
        ``jacfwd``, records ``r``, and either stops there (tolerance reached, a small last step, or
        ``max_iterations`` steps taken) or takes the step: ``max_iterations`` steps cost
        ``max_iterations + 1`` Jacobians, and the residual behind them is compiled once.
        """

        def value_and_jacobian(x: Array) -> tuple[Array, Array, Any]:
            def with_value(v: Array) -> tuple[Array, tuple[Array, Any]]:
                r, aux = evaluate(v)
                return r, (r, aux)

            jac, (r, aux) = jax.jacfwd(with_value, has_aux=True)(x)
            return r, jac.reshape(r.shape[0], -1), aux

        def going(carry):
            return ~carry[4]

        def body(carry):
            x, _, _, k, _, small, cost_history, residual_history = carry
            r, jac, aux = value_and_jacobian(x)
            cost, biggest = measures(r)
            cost_history = cost_history.at[k].set(cost)
            residual_history = residual_history.at[k].set(biggest)
            stop = (k >= limit) | small
            if tolerance is not None:
                stop = stop | (biggest <= tolerance)
            diagonal = marquardt_scaling(jac) if scaling == "marquardt" else None
            x_new, length = step_from(x, jac, r, diagonal, mu0)
            x = jnp.where(stop, x, x_new)
            small = jnp.where(stop, small, is_small(length, x_new))
            return x, r, aux, jnp.where(stop, k, k + 1), stop, small, cost_history, residual_history

        zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), (r_shape, aux_shape))
        false = jnp.zeros((), bool)
        init = (x0, *zeros, jnp.zeros((), jnp.int32), false, false, nan, nan)
        x, r, aux, k, _, small, cost_history, residual_history = lax.while_loop(going, body, init)
        converged = small
        if tolerance is not None:
            converged = converged | (jnp.max(jnp.abs(r)) <= tolerance)
        return LeastSquaresResult(x, r, measures(r)[0], k, mu0, converged, cost_history, residual_history, aux)

    if not adaptive:
        return damped_gauss_newton()
    r0, aux0 = evaluate(x0)
    size = r0.shape[0]

    def trial(x: Array, jac: Array, r: Array, diagonal: Array | None, mu: Array) -> tuple[Array, Array, Any, Array]:
        """``(x_new, r(x_new), aux(x_new), |dx|)`` of the step with damping ``mu``."""
        x_new, length = step_from(x, jac, r, diagonal, mu)
        return (x_new, *evaluate(x_new), length)

    def keep_going(carry):
        _, r, _, _, _, k, small, failed, _, _ = carry
        going = (k < limit) & ~small & ~failed
        if tolerance is not None:
            going = going & (jnp.max(jnp.abs(r)) > tolerance)
        return going

    def step(carry):
        x, r, aux, cost, mu, k, _, _, cost_history, residual_history = carry
        jac = jax.jacfwd(lambda v: evaluate(v)[0])(x).reshape(size, -1)
        diagonal = marquardt_scaling(jac) if scaling == "marquardt" else None

        def rejected(attempt):
            return ~attempt[-1] & (attempt[0] < max_tries)

        def retry(attempt):
            tries, mu_try, *_ = attempt
            x_new, r_new, aux_new, length = trial(x, jac, r, diagonal, mu_try)
            cost_new = measures(r_new)[0]
            accepted = jnp.isfinite(cost_new) & (cost_new <= cost)
            # mu_try ends as the damping of the accepted step (or one factor past the last try).
            mu_try = jnp.where(accepted, mu_try, mu_try * damping_factor)
            return tries + 1, mu_try, x_new, r_new, aux_new, cost_new, length, accepted

        start = (jnp.zeros((), jnp.int32), mu, x, r, aux, cost, jnp.zeros((), r.dtype), jnp.zeros((), bool))
        _, mu_used, x_new, r_new, aux_new, cost_new, length, accepted = lax.while_loop(rejected, retry, start)
        mu_next = jnp.maximum(mu_used / damping_factor, min_damping)
        accepted_state = (
            x_new,
            r_new,
            aux_new,
            cost_new,
            mu_next,
            k + 1,
            is_small(length, x_new),
            jnp.zeros((), bool),
            cost_history.at[k + 1].set(cost_new),
            residual_history.at[k + 1].set(measures(r_new)[1]),
        )
        # A failed damping search leaves everything as it was and stops the iteration.
        failed_state = (x, r, aux, cost, mu, k, jnp.zeros((), bool), jnp.ones((), bool), cost_history, residual_history)
        return jax.tree.map(lambda a, b: jnp.where(accepted, a, b), accepted_state, failed_state)

    cost0, biggest0 = measures(r0)
    init = (
        x0,
        r0,
        aux0,
        cost0,
        mu0,
        jnp.zeros((), jnp.int32),
        jnp.zeros((), bool),
        jnp.zeros((), bool),
        nan.at[0].set(cost0),
        nan.at[0].set(biggest0),
    )
    x, r, aux, cost, mu, k, small, _, cost_history, residual_history = lax.while_loop(keep_going, step, init)
    converged = small
    if tolerance is not None:
        converged = converged | (jnp.max(jnp.abs(r)) <= tolerance)
    return LeastSquaresResult(x, r, cost, k, mu, converged, cost_history, residual_history, aux)


# ------------------------------------------------------------------------------------------
# Smooth minimisation: L-BFGS with a strong Wolfe line search.


class MinimizeResult(eqx.Module):
    """Result of :func:`lbfgs` (``I = max_iterations``).

    Attributes:
        x: the final iterate, shape of ``x0``.
        value: ``()`` ``f(x)``.
        iterations: ``()`` int32 accepted steps.
        evaluations: ``()`` int32 evaluations of ``f`` and its gradient, the one at ``x0``
            included.
        converged: ``()`` bool, stopped by a zero gradient (not by ``max_iterations``,
            ``max_evaluations`` or a line search that found no acceptable step).
        history: ``(I + 1,)`` ``f`` at ``x0`` and after each accepted step; NaN past the stop
            (``history[:iterations + 1]`` are the values).
    """

    x: Array
    value: Array
    iterations: Array
    evaluations: Array
    converged: Array
    history: Array


def lbfgs(
    value_and_grad: Callable[[Array], tuple[Array, Array]],
    x0: Array,
    *,
    max_iterations: int,
    memory: int = 10,
    max_evaluations: int | None = None,
    max_line_search: int = 30,
    sufficient_decrease: float = 1e-4,
    curvature: float = 0.9,
) -> MinimizeResult:
    """Minimise ``f`` by L-BFGS with a strong Wolfe line search (module docstring), inside
    ``jit``: one evaluation of ``value_and_grad`` per pass of a ``lax.while_loop``.

    Arguments:
        value_and_grad: ``x -> (f(x), grad f(x))`` (e.g. ``jax.value_and_grad(f)``), ``f``
            scalar, the gradient of ``x``'s shape.
        x0: starting point (any shape; the iteration works on its flattened copy).
        max_iterations: accepted steps at most.
        memory: ``(s, y)`` pairs kept (``m`` of algorithm 7.4).
        max_evaluations: evaluations at most, the one at ``x0`` included (default
            ``1 + max_iterations * max_line_search``).
        max_line_search: trial steps of one line search before it gives up (the iteration
            then stops at the last accepted point).
        sufficient_decrease, curvature: the Wolfe constants ``0 < c1 < c2 < 1``.

    Returns:
        :class:`MinimizeResult`.
    """
    counts = dict(max_iterations=max_iterations, memory=memory, max_line_search=max_line_search)
    if max_evaluations is not None:
        counts["max_evaluations"] = max_evaluations
    for name, value in counts.items():
        check_count(f"lbfgs: {name}", value, 1)
    if not 0.0 < sufficient_decrease < curvature < 1.0:
        raise ValueError(
            f"lbfgs: need 0 < sufficient_decrease < curvature < 1, got {sufficient_decrease} and {curvature}"
        )
    budget = 1 + max_iterations * max_line_search if max_evaluations is None else max_evaluations
    shape = jnp.shape(x0)
    flat0 = jnp.ravel(jnp.asarray(x0))
    dtype = flat0.dtype

    def evaluate(flat: Array) -> tuple[Array, Array]:
        value, grad = value_and_grad(flat.reshape(shape))
        return jnp.asarray(value, dtype), jnp.ravel(grad).astype(dtype)

    def direction(grad: Array, s_memory: Array, y_memory: Array, rho: Array, newest: Array) -> Array:
        """``-H g`` by the two-loop recursion (slots with ``rho = 0`` are empty), and
        ``-g / |g|`` where that does not descend (no pairs yet, or round-off)."""

        def newest_first(j, carry):
            q, alphas = carry
            i = (newest - j) % memory
            alpha = rho[i] * jnp.dot(s_memory[i], q)
            return q - alpha * y_memory[i], alphas.at[i].set(alpha)

        q, alphas = lax.fori_loop(0, memory, newest_first, (grad, jnp.zeros(memory, dtype)))
        yy = jnp.dot(y_memory[newest], y_memory[newest])
        gamma = jnp.where(rho[newest] > 0, 1.0 / jnp.where(rho[newest] > 0, rho[newest] * yy, 1.0), 1.0)

        def oldest_first(j, r):
            i = (newest + 1 + j) % memory
            beta = rho[i] * jnp.dot(y_memory[i], r)
            return r + (alphas[i] - beta) * s_memory[i]

        d = -lax.fori_loop(0, memory, oldest_first, gamma * q)
        norm = jnp.linalg.norm(grad)
        steepest = -grad / jnp.where(norm > 0, norm, 1.0)
        descends = (jnp.dot(grad, d) < 0) & (rho[newest] > 0)
        return jnp.where(descends, d, steepest)

    # The first pass evaluates at x0 (t = 0) and sets f, g, the history's first entry and the
    # first direction: value_and_grad is then called at one place in the whole program.
    zeros = jnp.zeros((memory, flat0.size), dtype)
    zero, one = jnp.zeros((), dtype), jnp.ones((), dtype)
    int0 = jnp.zeros((), jnp.int32)
    nan = jnp.full(max_iterations + 1, jnp.nan, dtype)
    # The line search's points along d as (step, f, slope): ``lo`` the best point with sufficient
    # decrease, ``hi`` the other end of the bracket once one is known (``zooming``); before that
    # ``lo`` is the previous trial of the growing search (algorithm 3.5).
    origin = (zero, nan[0], zero)
    init: dict[str, Any] = dict(
        x=flat0, f=nan[0], g=jnp.zeros_like(flat0), d=jnp.zeros_like(flat0), t=zero, lo=origin, hi=origin
    )
    init.update(
        zooming=jnp.zeros((), bool), s=zeros, y=zeros, rho=zeros[:, 0], newest=jnp.asarray(memory - 1, jnp.int32)
    )
    init.update(k=int0, evaluations=int0, trials=int0, stop=jnp.zeros((), bool), history=nan)

    def keep_going(c: dict[str, Any]) -> Array:
        return (c["k"] < max_iterations) & (c["evaluations"] < budget) & ~c["stop"]

    def step(c: dict[str, Any]) -> dict[str, Any]:
        first = c["evaluations"] == 0
        x, f, g, d, t = c["x"], c["f"], c["g"], c["d"], c["t"]
        f_t, g_t = evaluate(x + t * d)
        slope, slope_t = jnp.dot(g, d), jnp.dot(g_t, d)
        trial = (t, f_t, slope_t)
        finite = jnp.isfinite(f_t) & jnp.all(jnp.isfinite(g_t))
        decrease = finite & (f_t <= f + sufficient_decrease * t * slope)
        flat_enough = jnp.abs(slope_t) <= -curvature * slope  # strong Wolfe curvature condition
        lo, hi, zooming = c["lo"], c["hi"], c["zooming"]
        # Algorithm 3.5 (growing) and 3.6 (zoom) as one rule: a trial without sufficient
        # decrease, or no lower than lo, becomes hi; otherwise it is accepted if flat enough,
        # else it becomes lo (and the old lo becomes hi where the slope points back to it).
        worse = ~decrease | (f_t >= lo[1]) & (zooming | (lo[0] > 0))
        accept = ~first & ~worse & flat_enough
        back = ~worse & (slope_t * jnp.where(zooming, hi[0] - lo[0], 1.0) >= 0)
        new_hi = _pick(worse, trial, _pick(back, lo, hi))
        new_lo = _pick(worse, lo, trial)
        zooming_next = zooming | worse | back
        t_retry = jnp.where(zooming_next, _cubic_step(new_lo, new_hi), 2.0 * t)
        # Accepted: store the pair (s.y > 0 by the curvature condition; checked against round-off).
        s, y = t * d, g_t - g
        sy = jnp.dot(s, y)
        store = accept & (sy > 0)
        slot = jnp.where(store, (c["newest"] + 1) % memory, c["newest"])
        s_memory = jnp.where(store, c["s"].at[slot].set(s), c["s"])
        y_memory = jnp.where(store, c["y"].at[slot].set(y), c["y"])
        rho = jnp.where(store, c["rho"].at[slot].set(1.0 / jnp.where(store, sy, 1.0)), c["rho"])
        d_next = direction(g_t, s_memory, y_memory, rho, slot)
        # Moved: a new point (or, on the first pass, x0's values): new direction, t = 1.
        moved = accept | first
        k_next = c["k"] + accept.astype(jnp.int32)
        trials = jnp.where(moved, 0, c["trials"] + 1)
        stop = (moved & ~(jnp.linalg.norm(g_t) > 0)) | (first & ~finite) | (trials >= max_line_search)
        f_next = jnp.where(moved, f_t, f)
        return dict(
            x=jnp.where(accept, x + s, x),
            f=f_next,
            g=jnp.where(moved, g_t, g),
            d=jnp.where(moved, d_next, d),
            t=jnp.where(moved, one, t_retry),
            lo=_pick(moved, (zero, f_next, jnp.dot(g_t, d_next)), new_lo),
            hi=_pick(moved, origin, new_hi),
            zooming=~moved & zooming_next,
            s=s_memory,
            y=y_memory,
            rho=rho,
            newest=slot,
            k=k_next,
            evaluations=c["evaluations"] + 1,
            trials=trials,
            stop=stop,
            history=jnp.where(moved, c["history"].at[k_next].set(f_t), c["history"]),
        )

    final: dict[str, Any] = lax.while_loop(keep_going, step, init)
    x, f, g, k, evaluations, history = (final[key] for key in ("x", "f", "g", "k", "evaluations", "history"))
    converged = jnp.isfinite(f) & jnp.all(g == 0)
    return MinimizeResult(x.reshape(shape), f, k, evaluations, converged, history)


#: A point of a line search along ``d``: ``(step t, f(x + t d), slope g(x + t d).d)``.
_LinePoint = tuple[Array, Array, Array]


def _pick(condition: Array, a: _LinePoint, b: _LinePoint) -> _LinePoint:
    """``a`` where ``condition`` else ``b``, entry by entry."""
    return (jnp.where(condition, a[0], b[0]), jnp.where(condition, a[1], b[1]), jnp.where(condition, a[2], b[2]))


def _cubic_step(lo: _LinePoint, hi: _LinePoint) -> Array:
    """The next trial step inside the bracket ``[lo, hi]`` (points ``(step, f, slope)``): the
    minimiser of the cubic through both values and slopes (Nocedal and Wright eq 3.59), kept at
    least a tenth of the bracket from either end, or the midpoint where the cubic has none (or a
    value is not finite)."""
    (a, f_a, s_a), (b, f_b, s_b) = lo, hi
    d1 = s_a + s_b - 3.0 * (f_a - f_b) / jnp.where(a != b, a - b, 1.0)
    radicand = d1 * d1 - s_a * s_b
    d2 = jnp.sign(b - a) * jnp.sqrt(jnp.where(radicand > 0, radicand, 0.0))
    denominator = s_b - s_a + 2.0 * d2
    cubic = b - (b - a) * (s_b + d2 - d1) / jnp.where(denominator != 0, denominator, 1.0)
    low, high = jnp.minimum(a, b), jnp.maximum(a, b)
    margin = 0.1 * (high - low)
    usable = jnp.isfinite(cubic) & (radicand > 0) & (denominator != 0) & jnp.isfinite(f_b) & jnp.isfinite(s_b)
    return jnp.where(usable, jnp.clip(cubic, low + margin, high - margin), 0.5 * (a + b))


# ------------------------------------------------------------------------------------------
# A bracketed scalar root.


def itp_root(
    g: Callable[[float], float], low: float, high: float, g_low: float, g_high: float, tolerance: float
) -> float:
    """The end where ``g <= 0`` of a bracket ``[low, high]`` of a root of a scalar ``g``
    (``g(low) <= 0 < g(high)``, their values given), after shrinking the bracket to width
    ``tolerance`` by the ITP method (module docstring). Host-side Python (``g`` returns a float),
    for a ``g`` that is expensive to evaluate. A trial where ``g`` is exactly zero is returned at
    once; a trial where it is NaN counts as ``g > 0``."""
    epsilon = 0.5 * tolerance
    most = math.ceil(math.log2((high - low) / tolerance)) + 2  # n_1/2 + n_0
    kappa = 0.2 / (high - low)
    for j in range(most):
        if high - low <= tolerance:
            break
        middle, half_width = 0.5 * (low + high), 0.5 * (high - low)
        radius = epsilon * 2.0 ** (most - j) - half_width
        falsi = (low * g_high - high * g_low) / (g_high - g_low)
        truncation = kappa * (high - low) ** 2
        side = math.copysign(1.0, middle - falsi)
        trial = falsi + side * truncation if truncation <= abs(middle - falsi) else middle
        trial = trial if abs(trial - middle) <= radius else middle - side * radius
        g_trial = g(trial)
        if g_trial == 0.0:  # on the root: the feasible end itself
            return trial
        if g_trial < 0.0:
            low, g_low = trial, g_trial
        else:
            high, g_high = trial, g_trial
    return low


__all__ = [
    "DEFAULT_MAX_DAMPING",
    "DEFAULT_SINGULAR_THRESHOLD",
    "FORMS",
    "DampedLeastSquares",
    "LeastSquaresResult",
    "MinimizeResult",
    "damped_least_squares",
    "damped_solve",
    "equilibrated_lstsq",
    "levenberg_marquardt",
    "itp_root",
    "lbfgs",
    "limit_step",
    "marquardt_scaling",
]
