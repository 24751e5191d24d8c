"""Base inertial parameters and optimal excitation (sdjax.identification.base_parameters,
sdjax.excitation)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sdjax import excitation as ex
from sdjax import identification as ident
from sdjax.models import planar_four_link

Q0 = np.array([0.4, 0.6, -0.5, 0.7])
# The base turns about z only and every joint axis is z: the motion stays planar.
PLANAR_TWIST = (0.01, -0.02, 0.0, 0.0, 0.0, 0.02)
LINKS = ident.Unknowns(links=(1, 2, 3, 4))


@pytest.fixture(scope="module")
def planar():
    return planar_four_link()


@pytest.fixture(scope="module")
def planar_records(planar):
    """Three random Fourier excitations of the planar arm (2 s, logged every 20 ms)."""
    return [
        ex.random_excitation(planar, Q0, 2.0, 0.005, amplitude=0.3, seed=seed, base_twist=PLANAR_TWIST).subsample(4)
        for seed in range(3)
    ]


# ------------------------------------------------------------------------------------------
# The Fourier trajectory.


def test_fourier_excitation_derivatives_and_rest_at_both_ends():
    """qd and qdd are the time derivatives of q (checked by autodiff of q alone), the motion
    starts and ends at rest at q0, and stays there outside [0, T]."""
    rng = np.random.default_rng(0)
    q0 = rng.normal(size=3)
    reference = ex.FourierExcitation(q0, rng.normal(size=(3, 2, 4)), 2.5)
    position = lambda t: reference(t)[0]  # noqa: E731
    for t in rng.uniform(0.0, 2.5, 5):
        q, qd, qdd = reference(t)
        # Autodiff of the closed-form position: agreement to float64 round-off (q and qd are O(1),
        # qdd up to ~1e2 with 4 harmonics of 2 pi / 2.5 s: 1e-11 absolute is ~1e-13 relative).
        np.testing.assert_allclose(qd, jax.jacfwd(position)(t), rtol=0, atol=1e-12)
        np.testing.assert_allclose(qdd, jax.jacfwd(jax.jacfwd(position))(t), rtol=0, atol=1e-11)
    for t in (0.0, 2.5, -1.0, 4.0):
        q, qd, qdd = reference(t)
        # sin^2 window: q - q0 and qd vanish at the ends to round-off of sin(pi).
        np.testing.assert_allclose(q, q0, rtol=0, atol=1e-14)
        np.testing.assert_allclose(qd, 0.0, rtol=0, atol=1e-14)
    for t in (-1.0, 4.0):
        np.testing.assert_array_equal(reference(t)[2], 0.0)
    with pytest.raises(ValueError, match="coefficients: expected"):
        ex.FourierExcitation(q0, np.zeros((2, 2, 4)), 1.0)
    with pytest.raises(ValueError, match="FourierExcitation: duration: must be positive"):
        ex.FourierExcitation(q0, np.zeros((3, 2, 4)), 0.0)
    with pytest.raises(TypeError, match="FourierExcitation: duration: expected a number, got str"):
        ex.FourierExcitation(q0, np.zeros((3, 2, 4)), "1 s")


# ------------------------------------------------------------------------------------------
# Base parameters.


def test_base_parameters_reproduce_the_regressor_of_another_motion(planar, planar_records):
    """Y pi = Y_b beta (Gautier's identity) on a record the base set was not built from, for
    random parameters; the rank is the regressor's; Ixx, Iyy, Ixy of every link never enter a
    planar motion's momentum (the angular velocity is along z: L = I w uses Ixz, Iyz, Izz)."""
    base = ident.base_parameters(planar, planar_records[:2], LINKS)
    y = np.asarray(ident.regressor(planar, planar_records[2], LINKS))
    assert base.rank == ident.identifiability(planar, planar_records[2], LINKS).rank
    rng = np.random.default_rng(1)
    for _ in range(3):
        pi = rng.normal(size=40)
        full = y @ pi
        reduced = y[:, base.independent] @ (base.matrix @ pi)
        # The regrouping is exact up to float64 round-off of the QR (relative 1e-12 of |Y pi|).
        np.testing.assert_allclose(reduced, full, rtol=0, atol=1e-10 * np.max(np.abs(full)))
    planar_unexcited = {f"link{k}.{p}" for k in range(1, 5) for p in ("Ixx", "Iyy", "Ixy")}
    assert set(base.unexcited) == planar_unexcited
    assert len(base.labels()) == base.rank and "base parameters of 40" in base.describe()
    with pytest.raises(ValueError, match="no records"):
        ident.base_parameters(planar, [], LINKS)


def test_base_parameters_in_float32_keep_the_float64_rank(planar, planar_records):
    """The default rank tolerance follows the records' dtype: float32 round-off of the regressor
    (~1e-7 relative) must not count as rank (with the float64 tolerance it added 6)."""
    records32 = [jax.tree.map(lambda x: x.astype(jnp.float32), r) for r in planar_records[:2]]
    base64 = ident.base_parameters(planar, planar_records[:2], LINKS)
    base32 = ident.base_parameters(planar.astype(jnp.float32), records32, LINKS)
    assert base32.rank == base64.rank and set(base32.unexcited) == set(base64.unexcited)
    with pytest.raises(ValueError, match="base_parameters: tolerance: must lie strictly between 0 and 1"):
        ident.base_parameters(planar, planar_records[:1], LINKS, tolerance=0.0)


def test_identified_base_parameters_are_unique(planar, planar_records):
    """From a nominal model up to 25 % off, the full parameter vector is not identifiable (its
    unobservable part stays where the start put it), but its base parameters are: they match
    the truth's, while the full vectors differ.

    The nominal inertias are too large, not too small: link 2 is a thin rod (Izz within 2 % of
    Ixx + Iyy), and unobservable Ixx, Iyy held below the truth would bound the physically
    consistent estimate's Izz below the truth's (triangle inequality), biasing one base
    parameter (seen: 4.5 % with inertias 13 % low)."""
    truth = ident.link_parameters(planar, LINKS.links)
    rng = np.random.default_rng(3)
    factor = 1.0 + 0.25 * rng.uniform(0, 1, size=(4,))
    wrong = ident.InertialParameters(
        mass=truth.mass * factor, first_moment=truth.first_moment, inertia=truth.inertia * factor[:, None, None]
    )
    nominal = ident.apply_parameters(planar, LINKS.links, wrong)
    base = ident.base_parameters(planar, planar_records, LINKS)
    data = planar_records[0]
    result = ident.identify(nominal, data, LINKS)
    estimate = np.asarray(result.parameters.vector()).ravel()
    assert np.max(np.abs(estimate - np.asarray(truth.vector()).ravel())) > 1e-2  # not the truth
    beta_true, beta_est = base.values(truth), base.values(result.parameters)
    # Noise-free RK4 data: the momentum drift is ~1e-10 relative; 1e-6 also covers the
    # Levenberg-Marquardt stopping tolerance along the weakest base direction, and is far below
    # the 25 % the start was off.
    np.testing.assert_allclose(beta_est, beta_true, rtol=0, atol=1e-6 * np.max(np.abs(beta_true)))
    with pytest.raises(ValueError, match="parameters given"):
        base.values(ident.link_parameters(planar, (1,)))


# ------------------------------------------------------------------------------------------
# Optimal excitation.


def test_optimal_excitation_improves_the_criterion_within_the_limits(planar):
    """L-BFGS lowers the design objective at every iteration, the final design beats the
    start on its criterion, and an independent re-simulation of the returned reference keeps
    every limit (excursion, rate, torque)."""
    limits = dict(max_excursion=0.3, rate_limit=np.array([0.8, 1.0, 1.0, 1.2]), torque_limit=40.0)
    design = ex.optimal_excitation(
        planar,
        LINKS,
        Q0,
        1.5,
        0.01,
        max_iterations=8,
        harmonics=3,
        structural_records=2,
        base_twist=PLANAR_TWIST,
        **limits,
    )
    history = design.history
    # Each accepted L-BFGS step satisfies the line search's decrease condition; 1e-12 for
    # round-off of the objective at equal points.
    assert np.all(np.diff(history) <= 1e-12 * np.abs(history[:-1])), history
    assert history[-1] < history[0]
    start = float(ex.excitation_criterion(design.initial_singular_values))
    final = float(ex.excitation_criterion(design.singular_values))
    assert final < start, (start, final)
    # The designed record alone identifies every base parameter.
    assert ident.identifiability(planar, design.record, LINKS).rank == design.base.rank
    record = ident.tracking_record(planar, Q0, design.reference, 1.5, 0.01, base_twist=PLANAR_TWIST)
    # The final scaling keeps the compiled record within the limits; 1e-8 covers the round-off
    # between that record and this re-simulation.
    slack = 1.0 + 1e-8
    assert np.max(np.abs(np.asarray(record.states.q) - Q0)) <= 0.3 * slack
    assert np.all(np.max(np.abs(np.asarray(record.states.qd)), axis=0) <= limits["rate_limit"] * slack)
    assert np.max(np.abs(np.asarray(record.torques))) <= 40.0 * slack
    assert set(design.peaks) == {"excursion", "rate", "torque"} and max(design.peaks.values()) <= slack
    # The record the design reports is this one, subsampled as the design saw it.
    np.testing.assert_allclose(design.record.states.q, record.subsample(4).states.q, rtol=0, atol=1e-12)
    sv = ex.base_singular_values(planar, design.record, LINKS, design.base)
    np.testing.assert_allclose(sv, design.singular_values, rtol=1e-9)


def test_optimal_excitation_keeps_asymmetric_joint_limits(planar):
    """With absolute ``joint_limits`` the design may use each side of q0 up to its own limit
    (not the smaller excursion both ways): an independent re-simulation stays inside them, the
    reported peak is that record's largest use of them, and the criterion improves."""
    lower = Q0 - np.array([0.03, 0.4, 0.03, 0.4])
    upper = Q0 + np.array([0.4, 0.03, 0.4, 0.03])
    # (the other settings as in the test above, so its compiled programs serve this one too)
    design = ex.optimal_excitation(
        planar, LINKS, Q0, 1.5, 0.01, max_iterations=8, harmonics=3, structural_records=2, base_twist=PLANAR_TWIST,
        joint_limits=(lower, upper), rate_limit=np.array([0.8, 1.0, 1.0, 1.2]), torque_limit=40.0,
    )  # fmt: skip
    assert float(ex.excitation_criterion(design.singular_values)) < float(
        ex.excitation_criterion(design.initial_singular_values)
    )
    q = np.asarray(ident.tracking_record(planar, Q0, design.reference, 1.5, 0.01, base_twist=PLANAR_TWIST).states.q)
    # 1e-8 rad: round-off between the design's compiled record and this re-simulation
    assert np.all(q >= lower - 1e-8) and np.all(q <= upper + 1e-8)
    # the peak use of the limits, |q - middle| / half-range, computed here from the record
    middle, half = 0.5 * (upper + lower), 0.5 * (upper - lower)
    assert set(design.peaks) == {"joint_limits", "rate", "torque"}
    np.testing.assert_allclose(design.peaks["joint_limits"], np.max(np.abs(q - middle) / half), rtol=1e-8)
    # the wide sides are used: the motion goes beyond the narrow side's 0.03 rad (measured 2.6x
    # and 3.3x on joints 1 and 3, toward their wide sides; a design confined to
    # min(q0 - lower, upper - q0) both ways never would)
    assert np.max(np.abs(q - Q0)) > 2 * 0.03, np.max(np.abs(q - Q0), axis=0)
    assert design.peaks["joint_limits"] > 0.99  # (the position limits bind: measured 1 - 1e-10)


def test_optimal_excitation_refuses_bad_arguments(planar):
    with pytest.raises(ValueError, match="unknown criterion 'a-optimal'"):
        ex.optimal_excitation(planar, LINKS, Q0, 1.0, criterion="a-optimal")
    with pytest.raises(ValueError, match="q0 not strictly inside joint_limits for joint"):
        ex.optimal_excitation(planar, LINKS, Q0, 1.0, joint_limits=(Q0 - 0.1, Q0))
    with pytest.raises(ValueError, match="max_iterations: must be an integer >= 1"):
        ex.optimal_excitation(planar, LINKS, Q0, 1.0, max_iterations=0)
    with pytest.warns(DeprecationWarning, match="iterations= is now spelled max_iterations="):
        with pytest.raises(ValueError, match="max_iterations: must be an integer >= 1"):
            ex.optimal_excitation(planar, LINKS, Q0, 1.0, iterations=0)
    with pytest.raises(ValueError, match="rate_limit: must be positive"):
        ex.optimal_excitation(planar, LINKS, Q0, 1.0, rate_limit=0.0)
    with pytest.raises(ValueError, match="q0: expected"):
        ex.optimal_excitation(planar, LINKS, np.zeros(3), 1.0)
    with pytest.raises(ValueError, match="unknown criterion"):
        ex.excitation_criterion(jnp.ones(3), "e-optimal")
    with pytest.raises(ValueError, match="fewer than 2 samples"):
        ex.optimal_excitation(planar, LINKS, Q0, 0.02, 0.01, sample_every=4)
    with pytest.raises(TypeError, match="optimal_excitation: unknowns: expected an Unknowns, got tuple"):
        ex.optimal_excitation(planar, (1, 2), Q0, 1.0)
    # The tumbling base moves the PD-held joints, so even the rest record needs torque: a limit
    # of 1e-9 N m cannot be met by any motion.
    with pytest.raises(ValueError, match="the limits cannot be met by any motion from q0"):
        ex.optimal_excitation(planar, LINKS, Q0, 1.0, 0.01, torque_limit=1e-9, base_twist=PLANAR_TWIST)
