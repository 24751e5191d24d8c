"""Inertial parameter identification (sdjax.identification)."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.test_util import check_grads

import sdjax
from sdjax import editing
from sdjax import identification as ident
from sdjax.model import validate
from sdjax.models import free_flying_arm_7dof, planar_four_link
from sdjax.models.builtin import free_flying_arm_initial_q
from sdjax.models.random import random_inertia
from helpers import assert_close

PAYLOAD_LINK = 7


def true_payload() -> ident.InertialParameters:
    """A 30 kg box-like payload, centroid 0.3 m beyond the wrist centroid, tilted inertia."""
    inertia = np.array([[0.9, 0.05, -0.03], [0.05, 0.7, 0.02], [-0.03, 0.02, 0.6]])
    return ident.payload_parameters(30.0, np.array([0.3, 0.05, -0.04]), inertia)


def sinusoid_law(q0, amplitude, frequency, phase, kp, kd):
    """Joint PD tracking ``q0 + A sin(w t + phi)`` (a persistently exciting manoeuvre)."""

    def reference(t):
        arg = frequency * t + phase
        return q0 + amplitude * jnp.sin(arg), amplitude * frequency * jnp.cos(arg)

    return sdjax.JointPD(kp, kd, reference)


def simulate(model, q0, duration, dt, seed=0, base_twist=(0.02, -0.01, 0.01, 0.01, 0.02, -0.015), joint_scale=0.4):
    rng = np.random.default_rng(seed)
    n = model.num_joints
    amplitude = joint_scale * rng.uniform(0.5, 1.0, n)
    frequency = rng.uniform(1.0, 3.0, n)
    phase = rng.uniform(0.0, 2 * np.pi, n)
    state = sdjax.make_state(model, q=q0, base_linear_velocity=base_twist[:3], base_angular_velocity=base_twist[3:])
    # Gains from the joint-space inertia at q0: 5 rad/s bandwidth, damping ratio 0.7 (stable
    # for RK4 at the steps used, whatever the link sizes).
    joint_inertia = jnp.diag(sdjax.generalized_inertia_matrix(model, state))
    law = sinusoid_law(
        jnp.asarray(q0),
        jnp.asarray(amplitude),
        jnp.asarray(frequency),
        jnp.asarray(phase),
        25.0 * joint_inertia,
        7.0 * joint_inertia,
    )
    traj = sdjax.rollout(model, state, dt, int(round(duration / dt)), law)
    return ident.Dataset.from_trajectory(traj)


@pytest.fixture(scope="module")
def arm():
    return free_flying_arm_7dof()


@pytest.fixture(scope="module")
def payload_data(arm):
    """2 s of a PD manoeuvre of the arm holding the (unknown) payload, dt = 5 ms."""
    loaded = ident.attach_payload(arm, PAYLOAD_LINK, true_payload())
    return simulate(loaded, free_flying_arm_initial_q(), 2.0, 0.005)


# ------------------------------------------------------------------------------------------
# Parameterisation.


def random_bodies(seed: int, k: int) -> ident.InertialParameters:
    rng = np.random.default_rng(seed)
    mass = rng.uniform(0.5, 20.0, k)
    centroid = rng.normal(scale=0.3, size=(k, 3))
    inertia = np.stack([random_inertia(rng, m, 0.4) for m in mass])
    return ident.InertialParameters.from_centroidal(mass, centroid, inertia)


@pytest.mark.parametrize("seed", range(5))
def test_log_cholesky_round_trip(seed):
    params = random_bodies(seed, 4)
    theta = ident.to_log_cholesky(params)
    back = ident.from_log_cholesky(theta)
    # float64 Cholesky and exp/log: round-off relative to the largest entry.
    np.testing.assert_allclose(back.vector(), params.vector(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ident.to_log_cholesky(back), theta, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("seed", range(5))
def test_random_iterates_are_physical(seed, arm):
    """Any real theta is a rigid body: positive mass, centroidal inertia positive definite and
    satisfying the triangle inequality; the model with it passes Model validation."""
    theta = jax.random.normal(jax.random.PRNGKey(seed), (3, 10), jnp.float64)
    params = ident.from_log_cholesky(theta)
    assert np.all(np.asarray(params.mass) > 0)
    for inertia in np.asarray(params.centroidal_inertia):
        eig = np.linalg.eigvalsh(inertia)
        assert eig[0] > 0
        assert eig[0] + eig[1] >= eig[2] * (1 - 1e-12)
    validate(ident.apply_parameters(arm, (2, 5, 7), params))


def test_vector_round_trip():
    params = random_bodies(7, 3)
    back = ident.InertialParameters.from_vector(params.vector())
    np.testing.assert_allclose(back.inertia, params.inertia, rtol=0, atol=1e-14)


def test_apply_parameters_keeps_joints_and_end_points(arm):
    """A centroid shift moves the centroid only: joints and end points stay where they were."""
    state = sdjax.make_state(arm, q=free_flying_arm_initial_q())
    shift = np.array([[0.05, -0.02, 0.01], [0.1, 0.03, -0.02]])
    params = ident.InertialParameters.from_centroidal(
        np.array([6.0, 9.0]), shift, np.asarray(arm.link_inertia[np.array([5, 6])])
    )
    moved = ident.apply_parameters(arm, (6, 7), params)
    before, after = sdjax.forward_kinematics(arm, state), sdjax.forward_kinematics(moved, state)
    np.testing.assert_allclose(after.joint_position, before.joint_position, atol=1e-12)
    np.testing.assert_allclose(after.end_point_position, before.end_point_position, atol=1e-12)
    expected = before.centroid[6:] + jnp.einsum("kij,kj->ki", before.rotation[6:], shift)
    np.testing.assert_allclose(after.centroid[6:], expected, atol=1e-12)
    np.testing.assert_allclose(moved.link_mass[5:], [6.0, 9.0])


def test_pseudo_inertia_methods_and_their_earlier_module_functions(arm):
    """The pseudo-inertia of a parameter set and its inverse are InertialParameters methods (the
    module functions shared their names with sdjax.editing's, which take other arguments); the
    earlier functions still work, with a DeprecationWarning."""
    params = ident.link_parameters(arm, (2, 3))
    pseudo = params.pseudo_inertia()
    expected = editing.pseudo_inertia(params.mass, params.first_moment, params.inertia)
    np.testing.assert_array_equal(np.asarray(pseudo), np.asarray(expected))
    back = ident.InertialParameters.from_pseudo_inertia(pseudo)
    assert_close(back.vector(), params.vector(), 1e-13, "round trip")  # (float64 round-off of 4x4 sums)
    with pytest.warns(
        DeprecationWarning, match="identification.pseudo_inertia is now InertialParameters.pseudo_inertia"
    ):
        np.testing.assert_array_equal(np.asarray(ident.pseudo_inertia(params)), np.asarray(pseudo))
    with pytest.warns(DeprecationWarning, match="from_pseudo_inertia is now InertialParameters.from_pseudo_inertia"):
        assert_close(ident.from_pseudo_inertia(pseudo).vector(), params.vector(), 1e-13, "old inverse")


def test_payload_merge_matches_composite_body(arm):
    """Link + payload is the rigid union: mass adds, centroid is the mass-weighted mean."""
    payload = true_payload()
    loaded = ident.attach_payload(arm, PAYLOAD_LINK, payload)
    m_link = float(arm.link_mass[PAYLOAD_LINK - 1])
    total = m_link + 30.0
    np.testing.assert_allclose(loaded.link_mass[PAYLOAD_LINK - 1], total)
    shift = 30.0 * np.asarray(payload.centroid[0]) / total
    np.testing.assert_allclose(
        loaded.centroid_to_joint[PAYLOAD_LINK - 1], arm.centroid_to_joint[PAYLOAD_LINK - 1] - shift, atol=1e-14
    )
    validate(loaded)


# ------------------------------------------------------------------------------------------
# Residuals and gradients.


@pytest.mark.parametrize("residual", ["momentum", "dynamics"])
def test_loss_gradient_matches_finite_differences(residual, arm, payload_data):
    data = payload_data.subsample(40)  # 11 samples: the check is about derivatives, not data
    unknowns = ident.Unknowns(links=(6,), payload_link=PAYLOAD_LINK)
    theta0 = ident.to_log_cholesky(ident.link_parameters(arm, (6, PAYLOAD_LINK)))

    @jax.jit
    def loss(theta):
        r = ident.residuals(arm, data, unknowns, ident.from_log_cholesky(theta), residual=residual)
        return 0.5 * jnp.sum(r**2)

    # Central differences, step 1e-5 in log-Cholesky coordinates of order 1: truncation
    # ~1e-10, round-off ~1e-11 relative; check_grads' default tolerance for float64 is 1e-5.
    check_grads(loss, (theta0 + 0.1,), order=1, modes=("rev",), eps=1e-5)


@pytest.mark.parametrize("residual", ["momentum", "dynamics"])
def test_residuals_are_affine_in_the_parameters(residual, arm, payload_data):
    """``r(pi) = r(pi_0) + Y (pi - pi_0)`` for a far-away ``pi``: what ``identify`` relies on
    when it evaluates the regressor once and iterates on the affine model."""
    data = payload_data.subsample(20)
    unknowns = ident.Unknowns(links=(3,), payload_link=PAYLOAD_LINK)
    nominal = ident.link_parameters(arm, (3, PAYLOAD_LINK))
    far = ident.InertialParameters(nominal.mass * 2.5 + 1.0, nominal.first_moment - 0.3, nominal.inertia * 3.0)
    y = np.asarray(ident.regressor(arm, data, unknowns, nominal, residual=residual))
    r0 = np.asarray(ident.residuals(arm, data, unknowns, nominal, residual=residual))
    r1 = np.asarray(ident.residuals(arm, data, unknowns, far, residual=residual))
    predicted = r0 + y @ np.asarray(far.vector() - nominal.vector()).ravel()
    # Exact up to round-off of the dynamics, ~1e-12 of the residual scale (float64).
    assert_close(predicted, r1, 1e-11, "affine residual")
    # and the regressor is the same at the far point
    assert_close(ident.regressor(arm, data, unknowns, far, residual=residual), y, 1e-11, "constant regressor")


def test_residuals_accept_parameters_of_no_rigid_body(arm, payload_data):
    """A model refuses a tensor no body can have (:func:`apply_parameters` validates concrete
    values), but the residuals, affine in the parameters, are defined everywhere (an
    unconstrained least-squares estimate): no refusal, the affine prediction holds."""
    data = payload_data.subsample(40)
    unknowns = ident.Unknowns(links=(3,), payload_link=PAYLOAD_LINK)
    nominal = ident.link_parameters(arm, (3, PAYLOAD_LINK))
    vector = np.array(nominal.vector())
    vector[:, 6] = 3.0 * (vector[:, 4] + vector[:, 5])  # Izz > Ixx + Iyy: no body has it
    vector[1, 0] = -2.0  # a negative payload mass
    bad = ident.InertialParameters.from_vector(vector)
    with pytest.raises(ValueError, match="triangle inequality"):
        ident.apply_parameters(arm, (3,), jax.tree.map(lambda x: x[:1], bad))
    y = np.asarray(ident.regressor(arm, data, unknowns, nominal))
    r0 = np.asarray(ident.residuals(arm, data, unknowns, nominal))
    r1 = np.asarray(ident.residuals(arm, data, unknowns, bad))
    assert_close(r0 + y @ (vector - np.asarray(nominal.vector())).ravel(), r1, 1e-11, "affine residual")


def test_residual_zero_at_truth(arm, payload_data):
    unknowns = ident.Unknowns(payload_link=PAYLOAD_LINK)
    r = ident.residuals(arm, payload_data, unknowns, true_payload(), residual="momentum")
    # RK4 (dt = 5 ms) conserves the momentum to ~1e-11 relative; weights are 1/total mass.
    assert float(jnp.max(jnp.abs(r))) < 1e-9
    r_dyn = ident.residuals(arm, payload_data, unknowns, true_payload(), residual="dynamics")
    # Mid-point difference quotients: O(dt^2) truncation, dt = 5 ms.
    assert float(jnp.sqrt(jnp.sum(r_dyn**2))) < 1e-3


# ------------------------------------------------------------------------------------------
# Recovery from noise-free data.


def test_payload_recovery_momentum_noise_free(arm, payload_data):
    """Captured payload from momentum conservation only (no torques): all 10 parameters."""
    data = payload_data.subsample(4)  # 20 ms sampling, 101 samples
    result = ident.identify(
        arm, data, ident.Unknowns(payload_link=PAYLOAD_LINK), residual="momentum", truth=true_payload()
    )
    # Limited by RK4's momentum drift (~1e-11): recovery to better than 1e-6.
    assert result.errors["mass"][0] < 1e-7
    assert result.errors["com"][0] < 1e-7
    assert result.errors["inertia"][0] < 1e-6
    assert result.identifiability.rank == 10
    assert float(result.loss_history[-1]) < 1e-15
    validate(result.model)


@pytest.mark.slow
def test_payload_recovery_dynamics_noise_free(arm, payload_data):
    """Inverse-dynamics residual with difference-quotient accelerations (O(dt^2) bias)."""
    data = payload_data.subsample(2)
    result = ident.identify(
        arm, data, ident.Unknowns(payload_link=PAYLOAD_LINK), residual="dynamics", truth=true_payload()
    )
    # dt = 10 ms: the mid-point acceleration error ~ (dt w)^2 / 24 with w ~ 3 rad/s -> 1e-4.
    assert result.errors["mass"][0] < 2e-3
    assert result.errors["com"][0] < 2e-3
    assert result.errors["inertia"][0] < 2e-2


def test_link_recovery_in_observable_subspace(arm, payload_data):
    """Three unknown links (forearm roll, wrist pitch, wrist roll with its payload), default
    (least-squares) start: the estimate matches the truth in every observable direction."""
    loaded = ident.attach_payload(arm, PAYLOAD_LINK, true_payload())
    links = (5, 6, 7)
    truth = ident.link_parameters(loaded, links)
    data = payload_data.subsample(4)
    unknowns = ident.Unknowns(links=links)
    result = ident.identify(loaded, data, unknowns, truth=truth)
    report = result.identifiability
    # Error in column-equilibrated coordinates, with the unobservable directions projected out.
    scale = np.where(report.column_norms > 0, report.column_norms, 1.0)
    error = scale * np.asarray(result.parameters.vector() - truth.vector()).ravel()
    if report.unobservable.shape[1]:
        basis, _ = np.linalg.qr(scale[:, None] * report.unobservable)
        error = error - basis @ (basis.T @ error)
    reference = np.linalg.norm(scale * np.asarray(truth.vector()).ravel())
    # RK4 momentum drift ~1e-11 and the smallest retained singular value (> 1e-8) bound this.
    assert np.linalg.norm(error) < 1e-5 * reference
    assert float(result.loss_history[-1]) < 1e-15
    validate(result.model)


@pytest.mark.slow
def test_optax_optimizers_reduce_loss(arm, payload_data):
    data = payload_data.subsample(20)
    unknowns = ident.Unknowns(payload_link=PAYLOAD_LINK)
    for optimizer in (optax.adam(0.05), optax.lbfgs()):
        # Started from the nominal guess (a payload equal to the wrist link), not the LS solution.
        result = ident.identify(
            arm,
            data,
            unknowns,
            initial=ident.link_parameters(arm, (PAYLOAD_LINK,)),
            optimizer=optimizer,
            num_steps=30,
            truth=true_payload(),
        )
        history = np.asarray(result.loss_history)
        assert history[-1] < 0.1 * history[0], (optimizer, history[[0, -1]])


# ------------------------------------------------------------------------------------------
# Identifiability.


def test_identifiability_planar_motion():
    """Planar motion (all joint axes and the base rate along z): a link's Ixx, Iyy, Ixy (link
    frame, z = joint axis) never enter the momentum; the other 7 parameters are observable."""
    model = planar_four_link()
    data = simulate(model, np.array([0.4, 0.6, -0.5, 0.7]), 2.0, 0.01, base_twist=(0.01, -0.02, 0.0, 0.0, 0.0, 0.02))
    w = np.asarray(data.states.base_angular_velocity)
    assert np.max(np.abs(w[:, :2])) < 1e-12  # the motion is planar
    report = ident.identifiability(model, data.subsample(5), ident.Unknowns(links=(4,)))
    assert report.rank == 7
    names = report.parameter_names
    unobservable = [names.index(f"link4.{p}") for p in ("Ixx", "Iyy", "Ixy")]
    null = report.unobservable
    # The null space is spanned by the three named coordinate directions (to round-off).
    assert null.shape == (10, 3)
    np.testing.assert_allclose(np.linalg.norm(null[unobservable], axis=0), 1.0, atol=1e-8)
    text = report.describe()
    assert "link4.Ixx" in text and "7 of 10" in text


def test_identifiability_full_payload(arm, payload_data):
    report = ident.identifiability(
        arm, payload_data.subsample(10), ident.Unknowns(payload_link=PAYLOAD_LINK), true_payload()
    )
    assert report.rank == 10
    assert report.unobservable.shape == (10, 0)


# ------------------------------------------------------------------------------------------
# Errors.


def test_dataset_errors(payload_data):
    s = payload_data.states
    one = jax.tree.map(lambda x: x[:1], s)
    with pytest.raises(ValueError, match="at least 2 samples"):
        ident.Dataset(time=payload_data.time[:1], states=one)
    empty = jax.tree.map(lambda x: x[:0], s)
    with pytest.raises(ValueError, match="at least 2 samples"):
        ident.Dataset(time=payload_data.time[:0], states=empty)
    with pytest.raises(ValueError, match="base_position"):
        ident.Dataset(time=payload_data.time[:-1], states=s)
    with pytest.raises(ValueError, match="q/qd"):
        ident.Dataset(time=payload_data.time, states=eqx.tree_at(lambda st: st.q, s, s.q[:, :3]))
    with pytest.raises(ValueError, match="torques"):
        ident.Dataset(time=payload_data.time, states=s, torques=payload_data.torques[:, :3])
    with pytest.raises(ValueError, match="torques"):
        ident.Dataset(time=payload_data.time, states=s, torques=jnp.zeros((payload_data.num_samples, 7)))
    with pytest.raises(ValueError, match="strictly increasing"):
        ident.Dataset(time=payload_data.time[::-1], states=s)
    zero = eqx.tree_at(lambda st: st.base_quaternion, s, s.base_quaternion.at[3].set(0.0))
    with pytest.raises(ValueError, match=r"Dataset.states.base_quaternion: sample 3 is zero \(no attitude\)"):
        ident.Dataset(time=payload_data.time, states=zero)
    with pytest.raises(ValueError, match="time"):
        ident.Dataset(time=jnp.zeros((3, 2)), states=s)
    with pytest.raises(ValueError, match="NaN"):
        ident.Dataset(time=payload_data.time, states=s, torques=payload_data.torques.at[3, 2].set(jnp.nan))
    with pytest.raises(ValueError, match="level"):
        ident.add_noise(payload_data, -1.0)


def test_problem_errors(arm, payload_data):
    data = payload_data.subsample(50)
    with pytest.raises(ValueError, match=r"Unknowns: links\[0\]: index 8 out of range; expected 1\.\.7"):
        ident.identify(arm, data, ident.Unknowns(links=(8,)))
    with pytest.raises(ValueError, match=r"Unknowns: payload_link: index 0 out of range; expected 1\.\.7"):
        ident.identify(arm, data, ident.Unknowns(payload_link=0))
    with pytest.raises(ValueError, match="both an unknown link and the payload"):
        ident.identify(arm, data, ident.Unknowns(links=(7,), payload_link=7))
    with pytest.raises(ValueError, match="repeated"):
        ident.identify(arm, data, ident.Unknowns(links=(3, 3)))
    with pytest.raises(ValueError, match="nothing to estimate"):
        ident.identify(arm, data, ident.Unknowns())
    with pytest.raises(ValueError, match="unknown residual"):
        ident.identify(arm, data, ident.Unknowns(links=(2,)), residual="energy")
    no_torque = ident.Dataset(time=data.time, states=data.states)
    with pytest.raises(ValueError, match="needs measured torques"):
        ident.identify(arm, no_torque, ident.Unknowns(links=(2,)), residual="dynamics")
    with pytest.raises(ValueError, match="no gravity"):
        ident.identify(_with_gravity(arm), data, ident.Unknowns(links=(2,)))
    with pytest.raises(ValueError, match="data has 7 joints"):
        ident.identify(planar_four_link(), data, ident.Unknowns(links=(2,)))
    with pytest.raises(TypeError, match="identification: data: expected a Dataset, got dict"):
        ident.identify(arm, {"time": data.time}, ident.Unknowns(links=(2,)))
    with pytest.raises(ValueError, match="identify: max_iterations"):
        ident.identify(arm, data, ident.Unknowns(links=(2,)), max_iterations=-1)
    with pytest.warns(DeprecationWarning, match="num_steps= is now spelled max_iterations="):
        with pytest.raises(ValueError, match="identify: max_iterations"):
            ident.identify(arm, data, ident.Unknowns(links=(2,)), num_steps=-1)
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="not both"):
        ident.identify(arm, data, ident.Unknowns(links=(2,)), num_steps=3, max_iterations=4)
    with pytest.raises(ValueError, match="initial has"):
        ident.identify(arm, data, ident.Unknowns(links=(2,)), initial=ident.link_parameters(arm, (2, 3)))
    with pytest.raises(ValueError, match="not physically consistent"):
        ident.to_log_cholesky(
            ident.InertialParameters.from_vector(jnp.asarray([[1.0, 0, 0, 0, 1.0, 1.0, 3.0, 0, 0, 0]]))
        )
    with pytest.raises(ValueError, match="expected shape"):
        ident.InertialParameters.from_vector(jnp.zeros((2, 9)))


def _with_gravity(model):
    return eqx.tree_at(lambda m: m.gravity, model, jnp.asarray([0.0, 0.0, -9.81]))


# ------------------------------------------------------------------------------------------
# Uncertainty of the estimates.


def test_covariance_matches_monte_carlo_over_noise_seeds(arm, payload_data, monkeypatch):
    """Predicted standard deviations and 95 % interval coverage against a Monte-Carlo over
    noise seeds (payload case, all 10 parameters identifiable). The noise is white Gaussian
    noise added to the residual vector (the noise model of ``s^2 (J^T J)^+``), injected into the
    residual offset that ``identify`` evaluates, so the whole LM solve and the covariance of
    ``identify`` are exercised (compiled once: same shapes every seed)."""
    data = payload_data.subsample(8)  # 51 samples over 2 s, R = 306 residuals
    unknowns = ident.Unknowns(payload_link=PAYLOAD_LINK)
    truth = np.asarray(true_payload().vector()).ravel()
    y = np.asarray(ident.regressor(arm, data, unknowns))
    # Noise level giving a 0.01 kg mass standard deviation (inertia entries ~0.03 kg m^2 against
    # centroidal principal moments ~0.6): every estimate stays well inside the physically
    # consistent set, the constraint never binds and the linear theory applies. (At 0.3 kg the
    # inertia spread reaches the boundary and the constrained estimates scatter less.)
    sigma = 0.01 / np.sqrt(np.linalg.inv(y.T @ y)[0, 0])
    exact = sigma * np.sqrt(np.diag(np.linalg.inv(y.T @ y)))
    original = ident.residuals
    num_seeds = 200
    estimates, predicted, covered = [], [], []
    for seed in range(num_seeds):
        noise = sigma * np.random.default_rng(seed).standard_normal(y.shape[0])
        monkeypatch.setattr(ident, "residuals", lambda *a, **k: original(*a, **k) + noise)
        result = ident.identify(arm, data, unknowns)
        cov = result.covariance
        estimate = np.asarray(result.parameters.vector()).ravel()
        estimates.append(estimate)
        predicted.append(cov.std)
        lower, upper = cov.intervals.T
        covered.append((lower <= truth) & (truth <= upper))
    monkeypatch.setattr(ident, "residuals", original)
    estimates, predicted = np.array(estimates), np.array(predicted)
    sample_std = estimates.std(axis=0, ddof=1)
    # (a) The sample standard deviation of N = 200 estimates has a relative standard error of
    # 1/sqrt(2 (N - 1)) = 5 %: +-25 % is 5 standard errors for each of the 10 parameters. The
    # predicted std (s^2 estimated per seed, dof = 296, itself within ~4 % per seed) is averaged.
    ratio = predicted.mean(axis=0) / sample_std
    np.testing.assert_array_less(np.abs(ratio - 1.0), 0.25, err_msg=f"predicted/sample std {ratio}")
    # The exact (known sigma) covariance agrees with the estimated one: s^2 is unbiased, and its
    # mean over 200 seeds has a relative standard error of sqrt(2/296)/sqrt(200) = 0.6 %.
    # (Relative to each std: the stds are ~1e-2, below assert_close's absolute floor of 1.)
    np.testing.assert_allclose(
        predicted.mean(axis=0), exact, rtol=0.03, err_msg="mean predicted std vs known-noise std"
    )
    # (b) Coverage of the 95 % intervals: binomial standard deviation sqrt(0.95 0.05 / 200)
    # = 1.5 %; accept 0.95 +- 4.5 % (3 standard deviations) for each parameter.
    coverage = np.mean(covered, axis=0)
    np.testing.assert_array_less(np.abs(coverage - 0.95), 0.045, err_msg=f"coverage {coverage}")
    # Derived quantities: the delta-method mass and centroid standard deviations against the
    # sample ones (same 5 standard errors as above).
    centroids = estimates[:, 1:4] / estimates[:, :1]
    ratio_c = cov.centroid_std[0] / centroids.std(axis=0, ddof=1)
    np.testing.assert_array_less(np.abs(ratio_c - 1.0), 0.25, err_msg=f"centroid std ratio {ratio_c}")
    assert abs(cov.mass_std[0] / sample_std[0] - 1.0) < 0.25


def test_sandwich_covariance_under_state_noise(arm, payload_data):
    """Noise on the measured states (``add_noise``): correlated within a sample's momentum rows
    and scaled by the motion, not the white residual noise of ``s^2 (J^T J)^+``. The sample-
    clustered sandwich predicts the spread of the estimates over noise seeds and covers the truth
    at the stated level; the white formula, on the same seeds, does not (measured over 200 seeds:
    white predicted/sample std 0.57-1.37 and coverage 0.72-1.0, sandwich 0.91-1.09 and
    0.92-0.97)."""
    data = payload_data.subsample(4)  # 101 samples over 2 s
    unknowns = ident.Unknowns(payload_link=PAYLOAD_LINK)
    truth = np.asarray(true_payload().vector()).ravel()
    num_seeds = 120
    estimates, sandwich, white, covered = [], [], [], []
    for seed in range(num_seeds):
        noisy = ident.add_noise(data, 1e-3, seed)
        result = ident.identify(arm, noisy, unknowns, covariance_method="sandwich")
        assert result.covariance.method == "sandwich"
        estimates.append(np.asarray(result.parameters.vector()).ravel())
        sandwich.append(result.covariance.std)
        white.append(ident.estimate_covariance(arm, noisy, unknowns, result.parameters).std)
        lower, upper = result.covariance.intervals.T
        covered.append((lower <= truth) & (truth <= upper))
    sample_std = np.array(estimates).std(axis=0, ddof=1)
    # The sample std of 120 estimates has a relative standard error of 1/sqrt(238) = 6.5 %;
    # +-25 % is ~4 of them for each of the 10 parameters.
    ratio = np.mean(sandwich, axis=0) / sample_std
    np.testing.assert_array_less(np.abs(ratio - 1.0), 0.25, err_msg=f"sandwich predicted/sample std {ratio}")
    # Coverage: binomial standard deviation sqrt(0.95 0.05 / 120) = 2 %; accept 0.95 +- 7 %.
    coverage = np.mean(covered, axis=0)
    np.testing.assert_array_less(np.abs(coverage - 0.95), 0.07, err_msg=f"sandwich coverage {coverage}")
    # The white formula misses by more than that on some parameter (the test can tell them apart).
    white_ratio = np.mean(white, axis=0) / sample_std
    assert np.max(np.abs(white_ratio - 1.0)) > 0.3, white_ratio
    with pytest.raises(ValueError, match="covariance_method"):
        ident.identify(arm, data, unknowns, covariance_method="robust")


def test_covariance_known_noise_std(arm, payload_data):
    """With ``noise_std`` given the covariance is ``(J^T W J)^-1`` exactly, whatever the residual."""
    data = payload_data.subsample(8)
    unknowns = ident.Unknowns(payload_link=PAYLOAD_LINK)
    result = ident.identify(arm, data, unknowns, noise_std=2e-6)
    y = np.asarray(ident.regressor(arm, data, unknowns)) / 2e-6
    # Round-off of a 10 x 10 inverse in float64 (condition of the equilibrated regressor ~1e4).
    # Relative to the largest entry (assert_close's floor of 1 would be far above these ~sigma^2 values).
    expected = np.linalg.inv(y.T @ y)
    np.testing.assert_allclose(result.covariance.covariance, expected, rtol=0, atol=1e-8 * np.abs(expected).max())
    assert result.covariance.known_noise and np.all(result.covariance.identifiable)
    with pytest.raises(ValueError, match="noise_std"):
        ident.estimate_covariance(arm, data, unknowns, result.parameters, noise_std=np.ones(7))


def test_covariance_rank_deficient_reports_infinite_variance():
    """Planar motion: link 4's Ixx, Iyy, Ixy never enter the momentum. Their variances are
    infinite (not the zero the plain pseudo-inverse would give), the other 7 finite."""
    model = planar_four_link()
    data = simulate(model, np.array([0.4, 0.6, -0.5, 0.7]), 2.0, 0.01, base_twist=(0.01, -0.02, 0.0, 0.0, 0.0, 0.02))
    data = ident.add_noise(data.subsample(5), 1e-3, 0)
    unknowns = ident.Unknowns(links=(4,))
    cov = ident.identify(model, data, unknowns).covariance
    names = cov.parameter_names
    bad = [names.index(f"link4.{p}") for p in ("Ixx", "Iyy", "Ixy")]
    good = [j for j in range(10) if j not in bad]
    assert cov.rank == 7
    assert np.all(np.isinf(cov.std[bad]))
    assert np.all(np.isfinite(cov.std[good])) and np.all(cov.std[good] > 0)
    assert np.all(np.isnan(cov.covariance[bad][:, good]))
    assert np.all(np.isfinite(cov.identifiable_covariance))
    # Mass and centroid depend on identifiable parameters only.
    assert np.all(np.isfinite(cov.mass_std)) and np.all(np.isfinite(cov.centroid_std))
    assert np.all(np.isinf(cov.intervals[bad, 1]))


def test_sinusoidal_excitation_is_a_free_floating_manoeuvre(arm):
    """The library's excitation: every RK4 step recorded, joint motion of the requested size
    tracked by the PD law, the base tumbling with the system momentum conserved (no external
    load), different seeds giving different motions, bad durations refused."""
    q0 = free_flying_arm_initial_q()
    twist = (0.02, -0.01, 0.01, 0.01, 0.02, -0.015)
    data = ident.sinusoidal_excitation(arm, q0, 0.5, 0.005, amplitude=0.2, base_twist=twist, seed=1)
    assert data.time.shape == (101,) and float(data.time[-1]) == pytest.approx(0.5, abs=1e-12)
    np.testing.assert_allclose(data.states.base_angular_velocity[0], twist[3:], rtol=0, atol=1e-15)
    momentum = np.asarray(jax.vmap(lambda s: sdjax.system_momentum(arm, s))(data.states))
    # RK4 conserves momentum to its truncation error at dt = 5 ms (~1e-10 of |momentum|).
    assert np.max(np.abs(momentum - momentum[0])) < 1e-8 * np.max(np.abs(momentum[0]))
    excursion = np.max(np.abs(np.asarray(data.states.q) - q0), axis=0)
    # Amplitudes 0.1..0.2 rad, tracked by a 5 rad/s PD loop within 0.5 s: each joint moves, none
    # beyond the largest amplitude plus the tracking error.
    assert np.all(excursion > 1e-3) and np.all(excursion < 0.3), excursion
    other = ident.sinusoidal_excitation(arm, q0, 0.5, 0.005, amplitude=0.2, base_twist=twist, seed=2)
    assert not np.allclose(other.states.q, data.states.q)
    with pytest.raises(ValueError, match="tracking_record: duration: must be finite, got nan"):
        ident.sinusoidal_excitation(arm, q0, float("nan"))
    with pytest.raises(ValueError, match="tracking_record: dt: must be positive, got 0.0"):
        ident.sinusoidal_excitation(arm, q0, 0.5, 0.0)
    with pytest.raises(ValueError, match=r"tracking_record: duration / dt = inf steps exceeds the longest rollout"):
        ident.sinusoidal_excitation(arm, q0, 1e300, 1e-10)  # (an OverflowError in round() before)


def test_dataset_file_round_trip_and_refusals(payload_data, tmp_path):
    """Dataset.save / load: the same arrays back (float64), torques included; a damaged or
    mismatched file is refused naming the file and the array."""
    data = payload_data.subsample(20)
    path = tmp_path / "record.npz"
    data.save(path)
    back = ident.Dataset.load(path, num_joints=7)
    for a, b in zip(jax.tree.leaves(data), jax.tree.leaves(back)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert back.torques is not None and back.torques.shape == (data.num_samples - 1, 7)
    with np.load(path) as stored:
        arrays = {k: stored[k] for k in stored.files if k != "meta"}
    bad = dict(arrays, qd=arrays["qd"][:, :6])  # one joint short
    np.savez(tmp_path / "bad.npz", **bad)
    with pytest.raises(ValueError, match=r"bad.npz: State.q and State.qd: expected two"):
        ident.Dataset.load(tmp_path / "bad.npz")
    missing = {k: v for k, v in arrays.items() if k != "base_quaternion"}
    np.savez(tmp_path / "missing.npz", **missing)
    with pytest.raises(ValueError, match=r"missing.npz: no entry 'base_quaternion'"):
        ident.Dataset.load(tmp_path / "missing.npz")
    np.savez(tmp_path / "torques.npz", **dict(arrays, torques=arrays["torques"][1:]))
    with pytest.raises(ValueError, match=r"torques.npz: entry 'torques' has shape"):
        ident.Dataset.load(tmp_path / "torques.npz")
    np.savez(tmp_path / "short.npz", **{k: v[:1] for k, v in arrays.items() if k != "torques"})
    with pytest.raises(ValueError, match=r"short.npz: array 'time' holds 1 samples; a record needs at least 2"):
        ident.Dataset.load(tmp_path / "short.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match=r"junk.npz: not a measured record"):
        ident.Dataset.load(tmp_path / "junk.npz")
    with pytest.raises(ValueError, match=r"the model has 6"):
        ident.Dataset.load(path, num_joints=6)


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_least_squares_start_is_a_body_in_the_parameters_precision(dtype):
    """The unconstrained start is projected onto consistent bodies by raising the pseudo-inertia's
    small eigenvalues to a floor. A floor below the precision of the largest eigenvalue is lost
    when the body is rounded to float32: the float32 inertia-identification notebook was refused
    its start (``to_log_cholesky``: eigenvalues [-4.5e-4, 3.9e-4, 218, 31138])."""
    rng = np.random.default_rng(3)
    basis = np.linalg.qr(rng.normal(size=(4, 4)))[0]
    estimate = (basis * np.array([-1e-3, 1e-4, 217.0, 31138.0])) @ basis.T  # two eigenvalues near 0
    target = np.asarray(ident.InertialParameters.from_pseudo_inertia(jnp.asarray(estimate[None])).vector(), np.float64)
    nominal = ident.link_parameters(free_flying_arm_7dof().astype(dtype), (1,))
    # an identity regressor: the least-squares estimate is the target itself
    offset = -(target - np.asarray(nominal.vector(), np.float64)).ravel()
    start = ident._least_squares_start(np.eye(10), offset, nominal)
    assert start.mass.dtype == dtype
    theta = ident.to_log_cholesky(start)  # refused before for float32
    assert np.all(np.isfinite(np.asarray(theta)))
    # the large eigenvalues are kept: the floor moves only the small ones, and rounding the body to
    # its precision moves the large ones by a few eps (float32 1.2e-7, float64 2.2e-16) times the
    # entries' spread: 1e-5 and 1e-12 leave two orders of margin
    eig = np.linalg.eigvalsh(np.asarray(start.pseudo_inertia(), np.float64)[0])
    tol = 1e-5 if dtype == jnp.float32 else 1e-12
    np.testing.assert_allclose(eig[2:], [217.0, 31138.0], rtol=tol)
    assert eig[0] > 0


# ------------------------------------------------------------------------------------------
# Argument checks (tolerance, unknowns, optimizer, weights, bodies, subsample).


@pytest.fixture(scope="module")
def short_data(arm):
    """0.2 s of the PD manoeuvre of the loaded arm, 21 samples: enough for the argument checks."""
    loaded = ident.attach_payload(arm, PAYLOAD_LINK, true_payload())
    return simulate(loaded, free_flying_arm_initial_q(), 0.2, 0.01)


@pytest.mark.parametrize("tolerance", [np.nan, 2.0, np.inf, -1.0, 0.0, 1.0])
def test_identification_tolerance_out_of_range_is_refused(arm, short_data, tolerance):
    unknowns = ident.Unknowns(payload_link=PAYLOAD_LINK)
    with pytest.raises(ValueError, match=r"identifiability: tolerance: must lie strictly between 0 and 1"):
        ident.identifiability(arm, short_data, unknowns, tolerance=tolerance)
    with pytest.raises(ValueError, match=r"estimate_covariance: tolerance: must lie strictly between 0 and 1"):
        ident.estimate_covariance(arm, short_data, unknowns, true_payload(), tolerance=tolerance)
    with pytest.raises(ValueError, match=r"identify: tolerance: must lie strictly between 0 and 1"):
        ident.identify(arm, short_data, unknowns, tolerance=tolerance, max_iterations=1)


def test_identification_tolerance_type_is_refused(arm, short_data):
    unknowns = ident.Unknowns(payload_link=PAYLOAD_LINK)
    with pytest.raises(TypeError, match=r"identifiability: tolerance: expected a number"):
        ident.identifiability(arm, short_data, unknowns, tolerance="a")
    with pytest.raises(TypeError, match=r"estimate_covariance: tolerance: expected a number"):
        ident.estimate_covariance(arm, short_data, unknowns, true_payload(), tolerance="a")
    with pytest.raises(TypeError, match=r"identify: tolerance: expected a number"):
        ident.identify(arm, short_data, unknowns, tolerance="a")
    # A valid tolerance still gives the full rank of the payload (10 parameters).
    assert ident.identifiability(arm, short_data, unknowns, tolerance=1e-8).rank == 10


def test_unknowns_links_are_checked_and_a_list_is_taken_as_a_tuple(arm, short_data):
    assert ident.Unknowns(links=[2]) == ident.Unknowns(links=(2,))
    assert ident.Unknowns(links=[np.int64(2)], payload_link=np.int64(7)) == ident.Unknowns(links=(2,), payload_link=7)
    report = ident.identifiability(arm, short_data, ident.Unknowns(links=[2]))
    assert report.num_parameters == 10
    with pytest.raises(TypeError, match=r"Unknowns: links: expected a tuple of link indices, got int 2"):
        ident.Unknowns(links=2)
    # Indices are checked against the model (check_index), as at every door taking one.
    with pytest.raises(TypeError, match=r"Unknowns: links\[1\]: expected a static integer index 1\.\.7, got float"):
        ident.identifiability(arm, short_data, ident.Unknowns(links=(1, 2.0)))
    with pytest.raises(TypeError, match=r"Unknowns: links\[0\]: expected a static integer index 1\.\.7, got bool"):
        ident.identifiability(arm, short_data, ident.Unknowns(links=(True,)))
    with pytest.raises(TypeError, match=r"Unknowns: payload_link: expected a static integer index 1\.\.7, got str"):
        ident.identifiability(arm, short_data, ident.Unknowns(payload_link="7"))


def test_identify_refuses_wrong_unknowns_and_optimizer(arm, short_data):
    with pytest.raises(TypeError, match=r"identification: unknowns: expected a sdjax.Unknowns, got int"):
        ident.identify(arm, short_data, 3)
    with pytest.raises(TypeError, match=r"identify: optimizer: expected None .* got str 'adam'"):
        ident.identify(arm, short_data, ident.Unknowns(payload_link=PAYLOAD_LINK), optimizer="adam")
    # An optax optimiser is still taken.
    result = ident.identify(
        arm, short_data, ident.Unknowns(payload_link=PAYLOAD_LINK), optimizer=optax.adam(1e-3), max_iterations=2
    )
    assert result.loss_history.shape == (3,)


@pytest.mark.parametrize(
    "weights, error, message",
    [
        (np.ones(3), ValueError, r"expected shape \(6,\) \(one per row of \[P; L_O\]\), got shape \(3,\)"),
        (np.ones(1), ValueError, r"expected shape \(6,\).*got shape \(1,\)"),
        (np.ones((21, 1)), ValueError, r"expected shape \(6,\).*got shape \(21, 1\)"),
        (np.full(6, np.nan), ValueError, r"must be non-negative and finite"),
        (np.array([1.0, 1, 1, 1, 1, -1]), ValueError, r"must be non-negative and finite"),
        ("abc", TypeError, r"expected numbers, got str"),
        ("a", TypeError, r"expected numbers, got str"),
    ],
)
def test_momentum_weights_are_checked(arm, short_data, weights, error, message):
    unknowns = ident.Unknowns(payload_link=PAYLOAD_LINK)
    with pytest.raises(error, match=r"identify: momentum_weights: " + message):
        ident.identify(arm, short_data, unknowns, momentum_weights=weights)
    with pytest.raises(error, match=r"identifiability: momentum_weights: " + message):
        ident.identifiability(arm, short_data, unknowns, momentum_weights=weights)
    with pytest.raises(error, match=r"estimate_covariance: momentum_weights: " + message):
        ident.estimate_covariance(arm, short_data, unknowns, true_payload(), momentum_weights=weights)
    with pytest.raises(error, match=r"residuals: momentum_weights: " + message):
        ident.residuals(arm, short_data, unknowns, true_payload(), momentum_weights=weights)


def test_dynamics_weights_are_checked(arm, short_data):
    with pytest.raises(ValueError, match=r"identify: dynamics_weights: expected shape \(13,\)"):
        ident.identify(arm, short_data, ident.Unknowns(links=(2,)), residual="dynamics", dynamics_weights=np.ones(6))


def test_estimate_covariance_refuses_the_wrong_number_of_bodies(arm, short_data):
    two = ident.link_parameters(arm, (2, 3))
    with pytest.raises(
        ValueError, match=r"estimate_covariance: params: expected 1 bodies .* got masses of shape \(2,\)"
    ):
        ident.estimate_covariance(arm, short_data, ident.Unknowns(payload_link=PAYLOAD_LINK), two)
    with pytest.raises(TypeError, match=r"estimate_covariance: params: expected sdjax.InertialParameters, got ndarray"):
        ident.estimate_covariance(arm, short_data, ident.Unknowns(payload_link=PAYLOAD_LINK), np.ones(10))
    with pytest.raises(ValueError, match=r"regressor: params: expected 1 bodies"):
        ident.regressor(arm, short_data, ident.Unknowns(links=(2,)), two)


def test_subsample_checks_every(short_data):
    assert short_data.num_samples == 21
    assert short_data.subsample(1).num_samples == 21
    assert short_data.subsample(20).num_samples == 2  # samples 0 and 20
    with pytest.raises(ValueError, match=r"Dataset.subsample: every: must be an integer >= 1, got 0"):
        short_data.subsample(0)
    with pytest.raises(ValueError, match=r"Dataset.subsample: every: must be an integer >= 1, got -1"):
        short_data.subsample(-1)
    with pytest.raises(ValueError, match=r"Dataset.subsample: every=21 keeps 1 of the 21 samples; .* at least 2"):
        short_data.subsample(21)
    with pytest.raises(ValueError, match=r"every=100 keeps 1 of the 21 samples"):
        short_data.subsample(100)
    with pytest.raises(TypeError, match=r"Dataset.subsample: every: expected an integer, got float 1.5"):
        short_data.subsample(1.5)
