"""Damped least squares and the Levenberg-Marquardt iteration (sdjax.solvers), against NumPy's
least squares, closed forms, SciPy's MINPACK Levenberg-Marquardt and a NumPy transcription of
Marquardt's rule."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax import solvers

EPS = np.finfo(np.float64).eps


def random_matrix(rng, m, n, cond=10.0):
    """``(m, n)`` matrix with singular values spread log-uniformly over [1, cond]."""
    u, _ = np.linalg.qr(rng.normal(size=(m, m)))
    v, _ = np.linalg.qr(rng.normal(size=(n, n)))
    k = min(m, n)
    sigma = np.geomspace(cond, 1.0, k)
    return (u[:, :k] * sigma) @ v[:, :k].T


# ------------------------------------------------------------------------------------------
# Damped linear least squares.


@pytest.mark.parametrize("seed", range(3))
def test_undamped_solve_equals_numpy_least_squares(seed):
    rng = np.random.default_rng(seed)
    # Over-determined, full column rank: the normal equations give the least-squares solution.
    tall, b = random_matrix(rng, 9, 4), rng.normal(size=9)
    expected = np.linalg.lstsq(tall, b, rcond=None)[0]
    for form in ("normal", "auto"):
        x = solvers.damped_solve(jnp.asarray(tall), jnp.asarray(b), 0.0, form=form)
        # Normal equations square the condition number (10 -> 100): error ~ 100 eps ~ 2e-14.
        np.testing.assert_allclose(x, expected, rtol=1e-11, atol=1e-13)
    # Under-determined, full row rank: the minimum-norm form gives J^+ b, which lstsq also returns.
    wide, b = random_matrix(rng, 3, 7), rng.normal(size=3)
    expected = np.linalg.lstsq(wide, b, rcond=None)[0]
    for form in ("min_norm", "auto"):
        x = solvers.damped_solve(jnp.asarray(wide), jnp.asarray(b), 0.0, form=form)
        np.testing.assert_allclose(x, expected, rtol=1e-11, atol=1e-13)  # same reason (J J^T)


@pytest.mark.parametrize("shape", [(4, 7), (7, 4), (5, 5)])
def test_damped_solve_is_the_augmented_least_squares_solution(shape):
    """Both forms minimise |J x - b|^2 + mu x^T D x: the least-squares solution of the stacked
    system [J; sqrt(mu D)] x = [b; 0] (NumPy's SVD solver as the reference)."""
    rng = np.random.default_rng(1)
    m, n = shape
    jac, b = random_matrix(rng, m, n, cond=100.0), rng.normal(size=m)
    d = rng.uniform(0.5, 2.0, n)
    for mu in (1e-6, 1e-2, 1.0):
        for diagonal in (None, d):
            penalty = np.ones(n) if diagonal is None else diagonal
            stacked = np.vstack([jac, np.diag(np.sqrt(mu * penalty))])
            expected = np.linalg.lstsq(stacked, np.concatenate([b, np.zeros(n)]), rcond=None)[0]
            for form in solvers.FORMS:
                diag = None if diagonal is None else jnp.asarray(diagonal)
                x = solvers.damped_solve(jnp.asarray(jac), jnp.asarray(b), mu, diagonal=diag, form=form)
                minimum_norm = form == "min_norm" or (form == "auto" and m <= n)
                if minimum_norm:
                    system = jac / penalty @ jac.T + mu * np.eye(m)
                else:
                    system = jac.T @ jac + mu * np.diag(penalty)
                # LU is backward stable: relative error <= c eps cond(system); c = 100 is generous.
                # (The normal form of a wide J at mu = 1e-6 has cond 1e10: the reason "auto" picks
                # the minimum-norm form there.)
                rtol = 100 * EPS * np.linalg.cond(system)
                np.testing.assert_allclose(x, expected, rtol=rtol, atol=rtol * np.max(np.abs(expected)))


def test_minimum_norm_solution_of_an_under_determined_system():
    rng = np.random.default_rng(2)
    jac, b = random_matrix(rng, 3, 8), rng.normal(size=3)
    x = np.asarray(solvers.damped_solve(jnp.asarray(jac), jnp.asarray(b), 0.0, form="min_norm"))
    np.testing.assert_allclose(jac @ x, b, atol=1e-13)  # solves the system (round-off of |b| ~ 1)
    # It lies in the row space of J (orthogonal to the null space) ...
    null = np.linalg.svd(jac)[2][3:].T  # (8, 5) orthonormal basis of null(J)
    assert np.max(np.abs(null.T @ x)) < 1e-13  # round-off of |x| ~ 1
    # ... so every other solution x + z is longer.
    for z in (null @ rng.normal(size=(5, 20))).T:
        assert np.linalg.norm(x + z) > np.linalg.norm(x)


def test_damping_bounds_the_solution_at_a_singularity():
    """Along a singular direction the damped solution scales b by sigma / (sigma^2 + mu) <=
    1 / (2 sqrt(mu)), so |x| <= |b| / (2 sqrt(mu)) even for an exactly singular J."""
    rng = np.random.default_rng(3)
    u, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    v, _ = np.linalg.qr(rng.normal(size=(5, 5)))
    b = rng.normal(size=3)
    for sigma_min in (1e-3, 1e-8, 0.0):
        jac = (u * np.array([1.0, 0.3, sigma_min])) @ v[:, :3].T
        for mu in (1e-4, 1e-2):
            x = np.asarray(solvers.damped_solve(jnp.asarray(jac), jnp.asarray(b), mu))
            assert np.all(np.isfinite(x))
            assert np.linalg.norm(x) <= np.linalg.norm(b) / (2.0 * np.sqrt(mu)) * (1.0 + 1e-12)  # round-off
            # Each singular direction scaled exactly by sigma / (sigma^2 + mu) (closed form).
            sigma = np.array([1.0, 0.3, sigma_min])
            expected = v[:, :3] @ (sigma / (sigma**2 + mu) * (u.T @ b))
            np.testing.assert_allclose(x, expected, rtol=1e-10, atol=1e-12)  # well conditioned: mu >= 1e-4


def test_marquardt_scaling_makes_the_step_independent_of_units():
    """Rescaling the unknowns (x = S x', so J' = J S) rescales the Marquardt-scaled step by
    S^-1: the step is the same physical change whatever the units."""
    rng = np.random.default_rng(4)
    jac, b = random_matrix(rng, 6, 4), rng.normal(size=6)
    scale = np.array([1e-2, 1.0, 10.0, 1e2])
    for mu in (1e-3, 1.0):
        x = solvers.damped_solve(jnp.asarray(jac), b, mu, diagonal=solvers.marquardt_scaling(jnp.asarray(jac)))
        scaled = jnp.asarray(jac * scale)
        x_scaled = solvers.damped_solve(scaled, b, mu, diagonal=solvers.marquardt_scaling(scaled), form="normal")
        # Invariant up to (a) the eps floor of the scaling, eps (max S / min S)^2 = 2e-8 relative
        # on the smallest entry, and (b) the round-off of a normal matrix whose condition number
        # the units raise by (max S / min S)^2 = 1e8 (error ~1e-8).
        np.testing.assert_allclose(np.asarray(x_scaled) * scale, x, rtol=1e-6)
    # A zero column gets a positive (eps) scale, so the damped system stays solvable.
    with_zero = jnp.asarray(np.hstack([jac, np.zeros((6, 1))]))
    d = solvers.marquardt_scaling(with_zero)
    assert float(d[-1]) > 0
    x = solvers.damped_solve(with_zero, b, 1e-3, diagonal=d, form="normal")
    assert np.all(np.isfinite(x)) and abs(float(x[-1])) < 1e-12  # the invisible unknown does not move


def test_limit_step():
    step = jnp.array([[0.3, -0.9], [0.1, 0.2]])
    limited = solvers.limit_step(step, 0.45)
    np.testing.assert_allclose(limited, step / 2.0, rtol=1e-15)  # direction kept, max entry = bound
    np.testing.assert_array_equal(solvers.limit_step(step, 2.0), step)  # short steps unchanged
    np.testing.assert_array_equal(solvers.limit_step(jnp.zeros(3), 0.1), 0.0)  # no division by zero


def test_equilibrated_lstsq():
    rng = np.random.default_rng(5)
    a, b = random_matrix(rng, 10, 4), rng.normal(size=10)
    np.testing.assert_allclose(solvers.equilibrated_lstsq(a, b), np.linalg.lstsq(a, b, rcond=None)[0], rtol=1e-12)
    # Column scaling does not change the answer (in physical units), even with units 1e12 apart,
    # where the raw singular values fall below the 1e-10 cut and plain lstsq drops a column.
    expected = np.linalg.lstsq(a, b)[0]
    scale = np.array([1e-6, 1.0, 1e3, 1e6])
    raw = np.linalg.lstsq(a * scale, b, rcond=1e-10)[0] * scale
    assert not np.allclose(raw, expected, rtol=1e-3)
    # a has condition number 10: the solve is accurate to ~eps cond^2, the scaling adds 1 ulp.
    np.testing.assert_allclose(solvers.equilibrated_lstsq(a * scale, b) * scale, expected, rtol=1e-11)
    # Rank deficient (a repeated column): the minimum-norm solution in equilibrated coordinates,
    # which splits the weight equally between the two copies.
    twin = np.hstack([a, a[:, :1]])
    x = solvers.equilibrated_lstsq(twin, b)
    np.testing.assert_allclose(x[0], x[-1], rtol=1e-9)
    np.testing.assert_allclose(twin @ x, a @ np.linalg.lstsq(a, b)[0], atol=1e-12)


def test_damped_least_squares_is_the_control_api():
    """The public damped least squares moved here; ``sdjax.control`` and ``sdjax`` re-export it."""
    assert sdjax.damped_least_squares is solvers.damped_least_squares is sdjax.control.damped_least_squares
    assert sdjax.DampedLeastSquares is solvers.DampedLeastSquares
    assert sdjax.control.DEFAULT_MAX_DAMPING == solvers.DEFAULT_MAX_DAMPING


# ------------------------------------------------------------------------------------------
# Levenberg-Marquardt.


def rosenbrock(x):
    """Rosenbrock's function as residuals: 1/2 |r|^2 = 50 (x2 - x1^2)^2 + (1 - x1)^2 / 2,
    minimum 0 at (1, 1)."""
    return jnp.stack([10.0 * (x[1] - x[0] ** 2), 1.0 - x[0]])


def marquardt_reference(x, steps, mu, scaled):
    """Marquardt's rule written out in NumPy with the analytic Jacobian (the test's oracle)."""

    def residual(x):
        return np.array([10.0 * (x[1] - x[0] ** 2), 1.0 - x[0]])

    x = np.array(x, np.float64)
    cost = 0.5 * residual(x) @ residual(x)
    history = [cost]
    for _ in range(steps):
        jac, r = np.array([[-20.0 * x[0], 10.0], [-1.0, 0.0]]), residual(x)
        d = np.diag(jac.T @ jac) if scaled else np.ones(2)
        for _ in range(30):
            dx = np.linalg.solve(jac.T @ jac + mu * np.diag(d), -jac.T @ r)
            new = 0.5 * residual(x + dx) @ residual(x + dx)
            if new <= cost:
                break
            mu *= 10.0
        else:
            break
        x, cost, mu = x + dx, new, max(mu / 10.0, 1e-12)
        history.append(cost)
    return np.array(history), x, mu


@pytest.mark.parametrize("scaling", ["identity", "marquardt"])
def test_levenberg_marquardt_follows_marquardts_rule_on_rosenbrock(scaling):
    x0 = jnp.array([-1.2, 1.0])  # the classic start, on the far side of the curved valley
    result = solvers.levenberg_marquardt(
        rosenbrock, x0, max_iterations=40, damping=1e-3, scaling=scaling, form="normal"
    )
    reference, x_ref, mu_ref = marquardt_reference(x0, 40, 1e-3, scaling == "marquardt")
    k = int(result.iterations)
    history = np.asarray(result.cost_history)
    assert k == len(reference) - 1 == 40  # no step tolerance: every iteration accepted
    # The same steps, damping increases (rejections happen on the way: mu reaches 0.1 to 1) and
    # decreases: the cost histories agree to the round-off of the iterates, which enters the
    # cost at first order (|J^T r| 1e-16) and so grows relative to a falling cost.
    np.testing.assert_allclose(history, reference, rtol=1e-6, atol=1e-20)
    np.testing.assert_allclose(result.x, x_ref, rtol=0, atol=1e-12)
    assert float(result.damping) == pytest.approx(mu_ref, rel=1e-12)
    # The known minimum, reached to round-off (Gauss-Newton converges quadratically on a
    # zero-residual problem).
    np.testing.assert_allclose(result.x, [1.0, 1.0], rtol=0, atol=1e-12)
    assert np.all(np.diff(history[: k + 1]) <= 0)  # accepted steps never increase the cost


def test_levenberg_marquardt_matches_minpack_on_an_exponential_fit():
    """A noisy fit y = a exp(-b t) + c (non-zero residual at the minimum) against SciPy's
    MINPACK Levenberg-Marquardt."""
    scipy_optimize = pytest.importorskip("scipy.optimize")
    t = np.linspace(0.0, 4.0, 30)
    y = 2.5 * np.exp(-1.3 * t) + 0.4 + 0.01 * np.random.default_rng(6).normal(size=t.size)

    def residual(p):
        return p[0] * jnp.exp(-p[1] * t) + p[2] - y

    start = jnp.array([1.0, 0.5, 0.0])
    result = jax.jit(
        lambda p: solvers.levenberg_marquardt(
            residual, p, max_iterations=100, damping=1e-3, scaling="marquardt", step_tolerance=1e-12
        )
    )(start)
    k = int(result.iterations)
    assert bool(result.converged) and k < 100  # stopped by the step tolerance
    history = np.asarray(result.cost_history)
    assert np.all(np.diff(history[: k + 1]) <= 0) and np.all(np.isnan(history[k + 1 :]))
    minpack = scipy_optimize.least_squares(
        lambda p: np.asarray(residual(jnp.asarray(p))), np.asarray(start), method="lm", xtol=1e-15, ftol=1e-15
    )
    # The cost is flat at the minimum: its round-off (1e-16 relative) fixes the parameters only
    # to about sqrt(eps) = 1.5e-8 (measured difference 8e-10).
    np.testing.assert_allclose(result.x, minpack.x, rtol=1e-7)
    np.testing.assert_allclose(result.cost, minpack.cost, rtol=1e-12)  # second order in the x difference
    # First-order optimality: the gradient J^T r vanishes to round-off of |J| |r| (~0.2).
    jac = jax.jacfwd(residual)(result.x)
    assert float(jnp.max(jnp.abs(jac.T @ result.residual))) < 1e-12


def test_stopping_rules():
    rng = np.random.default_rng(7)
    a, b = jnp.asarray(random_matrix(rng, 6, 3)), jnp.asarray(rng.normal(size=6))

    def linear(x):
        return a @ x - b

    x0 = jnp.zeros(3)
    # max_iterations only: exactly that many steps; the history is NaN past the stop.
    fixed = solvers.levenberg_marquardt(linear, x0, max_iterations=5, damping=1e-9)
    assert int(fixed.iterations) == 5 and not bool(fixed.converged)
    assert np.all(np.isfinite(fixed.cost_history))
    # Step tolerance: a linear residual is solved by the first (nearly undamped) step; the second
    # step is round-off, below 1e-12 (1 + |x|), and ends the iteration.
    stepped = solvers.levenberg_marquardt(linear, x0, max_iterations=20, damping=1e-12, step_tolerance=1e-12)
    assert int(stepped.iterations) == 2 and bool(stepped.converged)
    np.testing.assert_allclose(stepped.x, np.linalg.lstsq(a, b, rcond=None)[0], rtol=1e-10)  # cond ~10
    assert np.all(np.isnan(stepped.cost_history[3:]))
    # Residual tolerance, fixed damping (every step taken): stops at the first iterate with
    # max |r| <= tolerance, never before.
    target = jnp.asarray(rng.normal(size=3))

    def square(x):
        return x**2 - target**2

    tolerance = 1e-9
    solved = solvers.levenberg_marquardt(
        square, jnp.full(3, 3.0), max_iterations=50, damping=0.0, adaptive=False, tolerance=tolerance
    )
    k = int(solved.iterations)
    history = np.asarray(solved.residual_history)
    assert bool(solved.converged) and 0 < k < 50
    assert history[k] <= tolerance and np.all(history[:k] > tolerance)
    np.testing.assert_allclose(np.abs(solved.x), np.abs(target), rtol=1e-8)  # |r| = |x^2 - t^2| <= 1e-9


def test_failed_damping_search_stops_without_moving():
    """A residual whose derivative has the wrong sign: every damped step goes uphill, the damping
    search fails after max_tries and the iteration stops where it started."""

    @jax.custom_jvp
    def wrong(x):
        return x - 1.0

    @wrong.defjvp
    def _(primals, tangents):
        return wrong(primals[0]), -tangents[0]

    x0 = jnp.array([3.0, -2.0])
    result = solvers.levenberg_marquardt(wrong, x0, max_iterations=10, damping=1e-3, max_tries=5)
    assert int(result.iterations) == 0 and not bool(result.converged)
    np.testing.assert_array_equal(result.x, x0)
    assert np.all(np.isnan(result.cost_history[1:]))


def test_fixed_damping_step_limit_and_projection():
    """adaptive=False takes every step: the first is the damped minimum-norm step, limited to
    max_step per entry, then projected."""
    rng = np.random.default_rng(8)
    a, b = jnp.asarray(random_matrix(rng, 2, 5)), jnp.asarray(rng.normal(size=2))

    def residual(x):
        return a @ x - b

    x0 = jnp.zeros(5)
    one = solvers.levenberg_marquardt(residual, x0, max_iterations=1, damping=1e-2, adaptive=False, form="min_norm")
    expected = -np.asarray(a).T @ np.linalg.solve(np.asarray(a @ a.T) + 1e-2 * np.eye(2), -np.asarray(b))
    np.testing.assert_allclose(one.x, expected, rtol=1e-12)  # closed form; 2 x 2, well conditioned
    limited = solvers.levenberg_marquardt(
        residual, x0, max_iterations=1, damping=1e-2, adaptive=False, max_step=1e-3, project=lambda x: x
    )
    np.testing.assert_allclose(np.max(np.abs(limited.x)), 1e-3, rtol=1e-12)
    boxed = solvers.levenberg_marquardt(
        residual, x0, max_iterations=30, damping=1e-2, adaptive=False, project=lambda x: jnp.clip(x, -0.05, 0.05)
    )
    assert float(jnp.max(jnp.abs(boxed.x))) <= 0.05


def test_levenberg_marquardt_traces_under_jit_and_vmap():
    """The loop is a lax.while_loop: jit and vmap over starting points give the per-start answers."""
    starts = jnp.array([[-1.2, 1.0], [0.5, -0.5], [2.0, 2.0]])

    def solve(x0):
        return solvers.levenberg_marquardt(rosenbrock, x0, max_iterations=30, damping=1e-3, step_tolerance=1e-12)

    batched = jax.jit(jax.vmap(solve))(starts)
    for i, x0 in enumerate(starts):
        single = solve(x0)
        assert int(batched.iterations[i]) == int(single.iterations)
        # Same operations, batched: agreement to round-off of |x| ~ 1.
        np.testing.assert_allclose(batched.x[i], single.x, rtol=0, atol=1e-14)
        np.testing.assert_allclose(batched.x[i], [1.0, 1.0], rtol=0, atol=1e-12)


def test_argument_errors():
    with pytest.raises(ValueError, match="max_iterations"):
        solvers.levenberg_marquardt(rosenbrock, jnp.zeros(2), max_iterations=-1, damping=1e-3)
    with pytest.raises(ValueError, match="scaling"):
        solvers.levenberg_marquardt(rosenbrock, jnp.zeros(2), max_iterations=1, damping=1e-3, scaling="unit")
    with pytest.raises(ValueError, match="form"):
        solvers.damped_solve(jnp.eye(2), jnp.ones(2), 0.1, form="qr")


@pytest.mark.parametrize("adaptive", [False, True])
def test_auxiliary_output_belongs_to_the_final_iterate(adaptive):
    """has_aux: ``residual`` returns ``(r, aux)``; the result carries ``r`` and ``aux`` of the
    final ``x`` (with fixed damping the one evaluation site is the Jacobian's), and the same
    iterates as without aux."""
    target = jnp.array([0.3, -1.1, 2.0])

    def square(x):
        return x**2 - target**2

    def with_aux(x):
        return square(x), {"sum": jnp.sum(x), "cubes": x**3}

    options = dict(max_iterations=4, damping=1e-3, adaptive=adaptive)
    plain = solvers.levenberg_marquardt(square, jnp.full(3, 2.0), **options)
    result = solvers.levenberg_marquardt(with_aux, jnp.full(3, 2.0), has_aux=True, **options)
    assert plain.aux is None
    np.testing.assert_array_equal(result.x, plain.x)  # same arithmetic, aux aside
    np.testing.assert_array_equal(result.residual_history, plain.residual_history)
    x = np.asarray(result.x)
    # aux and r recomputed in NumPy at the final x (float64 round-off of one operation each)
    np.testing.assert_allclose(result.aux["sum"], x.sum(), rtol=1e-14)
    np.testing.assert_allclose(result.aux["cubes"], x**3, rtol=1e-14)
    np.testing.assert_allclose(result.residual, x**2 - np.asarray(target) ** 2, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(result.cost, 0.5 * np.sum(np.asarray(result.residual) ** 2), rtol=1e-14)
    assert int(result.iterations) == 4
    np.testing.assert_allclose(result.residual_history[4], np.max(np.abs(result.residual)), rtol=1e-14)


@pytest.mark.parametrize("adaptive", [True, False])
def test_iteration_limit_as_data_stops_where_the_static_count_would(adaptive):
    """``iteration_limit`` (traced under jit) stops after that many steps, the same iterates as a
    program compiled for that many (``max_iterations`` stays the histories' length), and one
    compiled program serves every limit."""
    x0 = jnp.array([-1.2, 1.0])
    options = dict(damping=1e-3, adaptive=adaptive, form="normal")
    traces = []

    @jax.jit
    def limited(limit):
        traces.append(limit)
        return solvers.levenberg_marquardt(rosenbrock, x0, max_iterations=12, iteration_limit=limit, **options)

    for k in (0, 3, 7, 12, 20):
        result = limited(jnp.asarray(k))
        reference = solvers.levenberg_marquardt(rosenbrock, x0, max_iterations=min(k, 12), **options)
        assert int(result.iterations) == min(k, 12)
        # The same steps: the loop is the same program but for the stopping count.
        np.testing.assert_allclose(result.x, reference.x, rtol=0, atol=1e-14)
        history = np.asarray(result.cost_history)
        np.testing.assert_allclose(history[: min(k, 12) + 1], reference.cost_history, rtol=1e-14, atol=0)
        assert np.all(np.isnan(history[min(k, 12) + 1 :]))
    assert len(traces) == 1  # traced (and compiled) once for all five limits


# ------------------------------------------------------------------------------------------
# L-BFGS.


def _rosenbrock(x):
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


@pytest.mark.parametrize("n", [2, 5, 10])
def test_lbfgs_finds_the_rosenbrock_minimum(n):
    """The minimum of the n-dimensional Rosenbrock function is x = (1, ..., 1), f = 0 (closed
    form); every accepted step lowers f (Armijo with a descent direction), the history starts at
    f(x0) and is NaN past the stop."""
    x0 = jnp.asarray(np.random.default_rng(n).normal(size=n))
    result = jax.jit(lambda x: solvers.lbfgs(jax.value_and_grad(_rosenbrock), x, max_iterations=300))(x0)
    k = int(result.iterations)
    # Converged to round-off: the minimiser to 1e-8 (f ~ |x - 1|^2 near it, so f <= 1e-16).
    np.testing.assert_allclose(result.x, np.ones(n), rtol=0, atol=1e-8)
    assert float(result.value) <= 1e-16
    history = np.asarray(result.history)
    # Same program, same x0: the first entry is f(x0) to round-off of the sum's order.
    np.testing.assert_allclose(history[0], _rosenbrock(x0), rtol=1e-14)
    assert np.all(np.diff(history[: k + 1]) < 0), history[: k + 1]
    assert np.all(np.isnan(history[k + 1 :]))
    assert history[k] == float(result.value)
    assert int(result.evaluations) >= k + 1


def test_lbfgs_steps_meet_the_strong_wolfe_conditions():
    """Each accepted step ``s = x_{k+1} - x_k`` (the iterates of runs stopped after k and k + 1
    steps: the iteration is deterministic) decreases f enough and ends where the slope along it
    is flat enough: ``f_{k+1} <= f_k + c1 g_k.s`` and ``|g_{k+1}.s| <= c2 |g_k.s|``, and
    ``g_k.s < 0`` (a descent direction)."""
    x0 = jnp.array([-1.2, 1.0, 0.5, -0.8])
    value_and_grad = jax.value_and_grad(_rosenbrock)
    iterates = [x0] + [
        solvers.lbfgs(value_and_grad, x0, max_iterations=k, sufficient_decrease=1e-4, curvature=0.9).x
        for k in range(1, 13)
    ]
    for k, (x, x_next) in enumerate(zip(iterates[:-1], iterates[1:])):
        (f, g), (f_next, g_next) = value_and_grad(x), value_and_grad(x_next)
        s = x_next - x
        assert float(g @ s) < 0, k
        # Round-off of f (~1e-16 relative) is far below the decrease asked for.
        assert float(f_next) <= float(f + 1e-4 * (g @ s)), k
        assert abs(float(g_next @ s)) <= 0.9 * abs(float(g @ s)), k


def test_lbfgs_solves_a_convex_quadratic():
    """``1/2 x^T A x - b^T x`` (A symmetric positive definite, condition ~1e2) is minimised at
    ``A^-1 b``; L-BFGS with a memory of the dimension reaches it within a few times n steps."""
    rng = np.random.default_rng(1)
    a = rng.normal(size=(8, 8))
    a = a @ a.T + np.eye(8)
    b = rng.normal(size=8)
    quadratic = lambda x: 0.5 * x @ a @ x - b @ x  # noqa: E731
    result = solvers.lbfgs(jax.value_and_grad(quadratic), jnp.zeros(8), max_iterations=100, memory=8)
    # A line search that compares values of f stops where f is flat to its round-off: within
    # |dx| ~ sqrt(2 eps |f| / lambda_min) ~ 1e-8 of the minimiser here (|f| ~ 0.3, lambda_min
    # ~ 1). 1e-7 absolute (entries are 0.02-0.45) leaves a margin of ten.
    np.testing.assert_allclose(result.x, np.linalg.solve(a, b), rtol=0, atol=1e-7)
    assert int(result.iterations) <= 40


def test_lbfgs_evaluates_the_objective_at_one_place_in_its_program():
    """One trace of ``value_and_grad`` per compiled minimisation (the point of the design: the
    objective is a rollout and its reverse pass, and compiling it dominates)."""
    traces = []

    def value_and_grad(x):
        traces.append(1)
        return jax.value_and_grad(_rosenbrock)(x)

    jax.jit(lambda x: solvers.lbfgs(value_and_grad, x, max_iterations=20))(jnp.zeros(3))
    assert len(traces) == 1


def test_lbfgs_keeps_the_shape_stops_at_a_stationary_point_and_respects_the_budget():
    target = jnp.arange(6.0).reshape(2, 3)
    bowl = lambda x: jnp.sum((x - target) ** 2)  # noqa: E731
    result = solvers.lbfgs(jax.value_and_grad(bowl), jnp.zeros((2, 3)), max_iterations=10)
    assert result.x.shape == (2, 3)
    # A separable quadratic of equal curvature: the first step along -g with the second's
    # interpolation lands on the minimum to round-off.
    np.testing.assert_allclose(result.x, target, rtol=0, atol=1e-12)
    # Started at the minimum: zero gradient, no step, converged.
    still = solvers.lbfgs(jax.value_and_grad(bowl), target, max_iterations=10)
    assert int(still.iterations) == 0 and bool(still.converged) and int(still.evaluations) == 1
    np.testing.assert_array_equal(still.x, target)
    # Single precision stays single (strict dtype promotion in the tests): to float32 round-off
    # of f near its minimum (|dx| ~ sqrt(eps32) ~ 3e-4 where f is flat to eps32).
    bowl32 = lambda x: jnp.sum((x - target.astype(jnp.float32)) ** 2)  # noqa: E731
    single = solvers.lbfgs(jax.value_and_grad(bowl32), jnp.zeros((2, 3), jnp.float32), max_iterations=10)
    assert single.x.dtype == jnp.float32 and single.history.dtype == jnp.float32
    np.testing.assert_allclose(single.x, target, rtol=0, atol=1e-3)
    # The evaluation budget counts the one at x0.
    short = solvers.lbfgs(jax.value_and_grad(_rosenbrock), jnp.zeros(4), max_iterations=50, max_evaluations=5)
    assert int(short.evaluations) == 5 and int(short.iterations) <= 4 and not bool(short.converged)


def test_lbfgs_backs_off_where_the_objective_is_infinite():
    """A barrier (f = inf outside the unit ball) in the way of the first trial steps: the line
    search shrinks them instead of stopping, and the minimum inside the ball is found."""
    centre = jnp.array([0.5, -0.3])

    def barrier(x):
        return jnp.where(jnp.sum(x**2) < 1.0, jnp.sum((x - centre) ** 2) - jnp.log1p(-jnp.sum(x**2)), jnp.inf)

    result = solvers.lbfgs(jax.value_and_grad(barrier), jnp.array([0.0, 0.9]), max_iterations=100)
    grad = jax.grad(barrier)(result.x)
    # A stationary point to round-off of the gradient (its terms are O(1)).
    assert np.all(np.isfinite(np.asarray(result.x))) and float(jnp.max(jnp.abs(grad))) < 1e-8
    # Started where f is not finite: no step, not converged.
    outside = solvers.lbfgs(jax.value_and_grad(barrier), jnp.array([2.0, 0.0]), max_iterations=100)
    assert int(outside.iterations) == 0 and int(outside.evaluations) == 1 and not bool(outside.converged)


def test_lbfgs_argument_errors():
    vg = jax.value_and_grad(_rosenbrock)
    with pytest.raises(ValueError, match="max_iterations: must be an integer >= 1"):
        solvers.lbfgs(vg, jnp.zeros(2), max_iterations=0)
    with pytest.raises(ValueError, match="memory: must be"):
        solvers.lbfgs(vg, jnp.zeros(2), max_iterations=5, memory=0)
    with pytest.raises(ValueError, match="0 < sufficient_decrease < curvature < 1"):
        solvers.lbfgs(vg, jnp.zeros(2), max_iterations=5, sufficient_decrease=0.9, curvature=0.5)
    with pytest.raises(ValueError, match="max_evaluations: must be"):
        solvers.lbfgs(vg, jnp.zeros(2), max_iterations=5, max_evaluations=0)


# ------------------------------------------------------------------------------------------
# A bracketed scalar root.

#: Bracket width asked of itp_root (2^-30: thirty bisection steps on [0, 1], the excitation
#: design's scale tolerance).
TOLERANCE = 2.0**-30


@pytest.mark.parametrize(
    "name, g, root, most_calls",
    [
        # (closed-form root; the most evaluations allowed: smooth roots in a handful, any root in at
        # most two more than the 30 bisection steps of the same tolerance)
        ("linear", lambda s: s - 0.3, 0.3, 10),
        ("cubic", lambda s: 8.0 * s**3 - 1.1, (1.1 / 8.0) ** (1.0 / 3.0), 10),
        ("root near the start", lambda s: 50.0 * s - 0.2, 0.004, 10),
        ("flat then steep", lambda s: 1e3 * max(s - 0.9, 0.0) ** 3 - 1e-12, 0.9 + 1e-5, 32),
        ("step", lambda s: -1.0 if s < 0.37 else 1.0, 0.37, 32),
    ],
)
def test_itp_root_brackets_closed_form_roots(name, g, root, most_calls):
    """``itp_root`` (the excitation design's scale search) returns the ``g <= 0`` end of a bracket
    narrower than the tolerance around the root, never more than two evaluations more than
    bisection, and few on smooth functions."""
    calls = []

    def counted(s):
        calls.append(s)
        return g(s)

    low = solvers.itp_root(counted, 0.0, 1.0, g(0.0), g(1.0), TOLERANCE)
    assert g(low) <= 0.0, name
    # Within the tolerance below the root (2e-16 for the round-off of the closed forms' roots).
    assert root - TOLERANCE - 2e-16 <= low <= root + 2e-16, (name, low)
    assert len(calls) <= most_calls, (name, len(calls))
