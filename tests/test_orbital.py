"""Orbital environment (sdjax.orbital): gravity gradient, rotating-frame loads, Clohessy-Wiltshire.

Independent references: Newton's inverse-square gravity summed over point-mass clouds that
reproduce each body's mass, centroid and inertia (NumPy); virtual work with finite-difference
point displacements (no Jacobians); the CW equations integrated by a matrix exponential
(SciPy); the textbook pitch-libration frequency; the Jacobi integral of the Hill problem.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

import sdjax
from sdjax.models import random_model
from sdjax.orbital import (
    GravityGradient,
    RotatingFrame,
    clohessy_wiltshire,
    clohessy_wiltshire_solution,
    combine_environments,
    gravity_gradient_wrenches,
    mean_motion_from_radius,
    rotating_frame_wrenches,
)
from sdjax.rotation import rpy_to_matrix, rotation_vector_to_matrix
from helpers import central_difference

# A reference orbit of radius R0 = 1000 km about a body with n = 1e-3 rad/s: small enough for
# the finite differences below to resolve the tidal loads, large enough (|r| / R0 ~ 3e-6 for
# the metre-sized systems used here) for the first-order tidal expansion to hold.
R0 = 1.0e6
N_ORBIT = 1.0e-3
MU = N_ORBIT**2 * R0**3


def _model(seed=3, links=4):
    return random_model(seed, links)


def _state(model, seed=0, offset=(1.5, -1.0, 0.7)):
    rng = np.random.default_rng(seed)
    return sdjax.make_state(
        model,
        base_position=np.asarray(offset),
        base_rotation=np.asarray(rpy_to_matrix(rng.uniform(-np.pi, np.pi, 3))),
        base_linear_velocity=rng.normal(scale=0.1, size=3),
        base_angular_velocity=rng.normal(scale=0.05, size=3),
        q=rng.uniform(-1.0, 1.0, model.num_joints),
        qd=rng.normal(scale=0.05, size=model.num_joints),
    )


def _point_clouds(model, state):
    """Six point masses per body (m/6 at c +- a_k v_k along the principal axes) with the body's
    mass, centroid and inertia: second moments J_k = tr(I)/2 - I_k = 2 (m/6) a_k^2.

    Returns (body index, mass, body-frame offset from the centroid) per point."""
    masses = np.concatenate([[float(model.base_mass)], np.asarray(model.link_mass)])
    inertias = np.concatenate([np.asarray(model.base_inertia)[None], np.asarray(model.link_inertia)])
    points = []
    for b, (m, inertia) in enumerate(zip(masses, inertias)):
        moments, axes = np.linalg.eigh(inertia)
        second = 0.5 * moments.sum() - moments
        for k in range(3):
            a = np.sqrt(3.0 * second[k] / m)
            for sign in (1.0, -1.0):
                points.append((b, m / 6.0, sign * a * axes[:, k]))
    return points


def _positions(model, state, points):
    kin = sdjax.forward_kinematics(model, state)
    rot, cen = np.asarray(kin.rotation), np.asarray(kin.centroid)
    return np.array([cen[b] + rot[b] @ s for b, _, s in points])


def _exact_tidal_forces(masses, positions):
    """Inverse-square gravity of a point Earth at -R0 e_x minus the reference point's gravity
    (the frame falls with it), per point mass; written to avoid cancellation."""
    d = positions + np.array([R0, 0.0, 0.0])
    dist = np.linalg.norm(d, axis=1)
    return -MU * masses[:, None] * (d / dist[:, None] ** 3 - np.array([1.0, 0.0, 0.0]) / R0**2)


def test_mean_motion_from_radius():
    # Kepler's third law: T = 2 pi sqrt(R^3 / mu); the ISS-like R = 6778 km gives ~92.6 min.
    n = float(mean_motion_from_radius(6778.0e3))
    assert abs(2 * np.pi / n / 60.0 - 92.56) < 0.05  # 0.05 min: the quoted period is rounded


def test_gravity_gradient_wrenches_against_point_masses():
    model = _model()
    state = _state(model)
    points = _point_clouds(model, state)
    pos = _positions(model, state, points)
    masses = np.array([m for _, m, _ in points])
    f = _exact_tidal_forces(masses, pos)
    kin = sdjax.forward_kinematics(model, state)
    cen = np.asarray(kin.centroid)
    forces, torques = gravity_gradient_wrenches(model, state, N_ORBIT, jnp.array([1.0, 0.0, 0.0]))
    bodies = np.array([b for b, _, _ in points])
    for b in range(model.num_bodies):
        sel = bodies == b
        ref_force = f[sel].sum(0)
        ref_torque = np.cross(pos[sel] - cen[b], f[sel]).sum(0)
        # 2e-5 relative: the neglected second-order tidal terms are ~1.5 |r| / R0 ~ 5e-6 of the
        # first-order ones for |r| <= 3 m; round-off is far smaller.
        np.testing.assert_allclose(forces[b], ref_force, rtol=0, atol=2e-5 * np.abs(ref_force).max())
        np.testing.assert_allclose(torques[b], ref_torque, rtol=0, atol=2e-5 * np.abs(ref_torque).max() + 1e-18)


def test_gravity_gradient_generalized_forces_by_virtual_work():
    """tau, base force and base torque equal sum_p f_p . dp/dcoordinate, with the point
    displacements from central differences of the point positions (no Jacobians involved)."""
    model = _model()
    state = _state(model)
    points = _point_clouds(model, state)
    masses = np.array([m for _, m, _ in points])
    f = _exact_tidal_forces(masses, _positions(model, state, points))
    env = GravityGradient(model, N_ORBIT, frame="hill")
    loads = env(0.0, state)
    h = 1e-6  # displacements are smooth; central-difference error ~h^2 ~ 1e-12 relative

    def work_rate(move):
        plus, minus = _positions(model, move(h), points), _positions(model, move(-h), points)
        return float(np.sum(f * (plus - minus)) / (2 * h))

    a0 = np.asarray(state.base_rotation)
    expected_force = [
        work_rate(lambda e, k=k: _replace(state, base_position=state.base_position + e * np.eye(3)[k]))
        for k in range(3)
    ]

    def rotate(e, k):
        rotation = np.asarray(rotation_vector_to_matrix(jnp.asarray(e * np.eye(3)[k]))) @ a0
        return _replace(state, base_quaternion=sdjax.matrix_to_quat(jnp.asarray(rotation)))

    expected_torque = [work_rate(lambda e, k=k: rotate(e, k)) for k in range(3)]
    expected_tau = [
        work_rate(lambda e, j=j: _replace(state, q=state.q + e * np.eye(model.num_joints)[j]))
        for j in range(model.num_joints)
    ]
    scale = max(np.abs(expected_force).max(), np.abs(expected_torque).max(), np.abs(expected_tau).max())
    # 3e-5 of the largest load: the expansion error (~5e-6) plus central differences of positions
    # of ~3 m with h = 1e-6 (round-off ~1e-16 * 3 / 1e-6 ~ 3e-10 m per unit, times forces).
    for got, want in (
        (loads.base_force, expected_force),
        (loads.base_torque, expected_torque),
        (loads.tau, expected_tau),
    ):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0, atol=3e-5 * scale)


def _replace(state, **changes):
    fields = dict(
        base_position=state.base_position,
        base_quaternion=state.base_quaternion,
        base_linear_velocity=state.base_linear_velocity,
        base_angular_velocity=state.base_angular_velocity,
        q=state.q,
        qd=state.qd,
    )
    fields.update({k: jnp.asarray(v) for k, v in changes.items()})
    return sdjax.State(**fields)


def test_rotating_frame_wrenches_against_point_masses():
    """Coriolis -2 m Omega x v and centrifugal -m Omega x (Omega x p) summed over point masses
    moving rigidly with each body (v_p = v_c + w x (p - c))."""
    model = _model(seed=5)
    state = _state(model, seed=2)
    omega = np.array([0.02, -0.01, 0.05])
    points = _point_clouds(model, state)
    pos = _positions(model, state, points)
    v_c, w = (np.asarray(x) for x in sdjax.link_velocities(model, state))
    cen = np.asarray(sdjax.forward_kinematics(model, state).centroid)
    forces, torques = rotating_frame_wrenches(model, state, omega)
    for b in range(model.num_bodies):
        sel = [k for k, (body, _, _) in enumerate(points) if body == b]
        m = np.array([points[k][1] for k in sel])[:, None]
        p = pos[sel]
        v = v_c[b] + np.cross(w[b], p - cen[b])
        f = -2 * m * np.cross(omega, v) - m * np.cross(omega, np.cross(omega, p))
        # 1e-12 relative: the cloud reproduces mass, centroid and inertia exactly, so the two
        # sums agree to round-off.
        np.testing.assert_allclose(forces[b], f.sum(0), rtol=1e-12, atol=1e-12 * np.abs(f).sum())
        np.testing.assert_allclose(torques[b], np.cross(p - cen[b], f).sum(0), rtol=1e-10, atol=1e-12 * np.abs(f).sum())


def _cw_matrix(n):
    """State matrix of x'' = 3 n^2 x + 2 n y', y'' = -2 n x', z'' = -n^2 z."""
    a = np.zeros((6, 6))
    a[:3, 3:] = np.eye(3)
    a[3, 0], a[3, 4] = 3 * n * n, 2 * n
    a[4, 3] = -2 * n
    a[5, 2] = -n * n
    return a


def test_clohessy_wiltshire_solution_matches_matrix_exponential():
    n = 1.1e-3
    x0 = np.array([100.0, -50.0, 20.0, 0.05, -0.2, 0.03])
    for t in (0.0, 700.0, 2500.0):
        p, v = clohessy_wiltshire_solution(n, x0[:3], x0[3:], t)
        ref = scipy.linalg.expm(_cw_matrix(n) * t) @ x0
        # 1e-9 relative: both are exact solutions; expm is accurate to ~1e-13.
        np.testing.assert_allclose(np.concatenate([p, v]), ref, rtol=1e-9, atol=1e-12)


@pytest.fixture(scope="module")
def hill_run():
    """An articulated system (random 3-link tree, free joints) released off the reference
    orbit in the Hill frame, a fifth of an orbit of RK4."""
    model = random_model(11, 3)
    n = 2e-3
    state = sdjax.make_state(
        model,
        base_position=[60.0, -40.0, 25.0],
        base_linear_velocity=[0.05, -0.12, 0.02],
        base_angular_velocity=[0.002, -0.003, 0.004],
        q=[0.3, -0.4, 0.2],
        qd=[0.01, -0.02, 0.015],
    )
    env = clohessy_wiltshire(model, n)
    dt, steps = 5.0, 126  # 630 s = 0.2 orbit; n dt = 0.01, RK4 error ~ (n dt)^4 per unit time
    traj = sdjax.rollout(model, state, dt, steps, environment=env)
    return model, n, env, traj


def test_center_of_mass_follows_clohessy_wiltshire(hill_run):
    model, n, _, traj = hill_run
    com = np.asarray(jax.vmap(lambda s: sdjax.center_of_mass(model, s))(traj.states))
    vcom = np.asarray(jax.vmap(lambda s: sdjax.center_of_mass_velocity(model, s))(traj.states))
    x0 = np.concatenate([com[0], vcom[0]])
    ref = np.array([scipy.linalg.expm(_cw_matrix(n) * t) @ x0 for t in np.asarray(traj.time)])
    # 1e-7 of the ~100 m excursion: RK4 global error (n dt)^4 ~ 1e-8 relative plus the internal
    # motion's integration error, which moves the CoM only through round-off.
    np.testing.assert_allclose(com, ref[:, :3], rtol=0, atol=1e-7 * np.abs(ref[:, :3]).max())
    np.testing.assert_allclose(vcom, ref[:, 3:], rtol=0, atol=1e-7 * np.abs(ref[:, 3:]).max())
    assert np.abs(com - com[0]).max() > 10.0  # the test is not vacuous: the CoM drifts by metres


def test_jacobi_integral_conserved_in_hill_frame(hill_run):
    model, _, env, traj = hill_run
    energy = jax.vmap(lambda s: sdjax.kinetic_energy(model, s) + env.potential_energy(0.0, s))(traj.states)
    energy = np.asarray(energy)
    kinetic = np.asarray(jax.vmap(lambda s: sdjax.kinetic_energy(model, s))(traj.states))
    # Coriolis loads do no work, so T + V_tidal + V_centrifugal is constant; 1e-7 of the
    # kinetic energy bounds the RK4 error of this run (measured ~1e-9).
    assert np.abs(energy - energy[0]).max() < 1e-7 * kinetic.max()
    assert np.ptp(kinetic) > 1e-3 * kinetic.max()  # energy really flows between T and V


def test_center_of_mass_in_nonrotating_frame():
    """The same physics in the non-rotating orbit-centred frame: radial direction turning as
    (cos nt, sin nt, 0), no fictitious loads; the CoM is the rotated CW solution."""
    model = random_model(11, 3)
    n = 2e-3
    r_hill, v_hill = np.array([60.0, -40.0, 25.0]), np.array([0.05, -0.12, 0.02])
    omega = np.array([0.0, 0.0, n])
    state = sdjax.make_state(model, base_position=r_hill, base_linear_velocity=v_hill + np.cross(omega, r_hill))
    com0 = np.asarray(sdjax.center_of_mass(model, state))
    assert np.allclose(com0, r_hill, atol=10.0)  # the base is near the CoM; exact values below
    env = GravityGradient(model, n, frame="nonrotating")
    traj = sdjax.rollout(model, state, 5.0, 126, environment=env)
    com = np.asarray(jax.vmap(lambda s: sdjax.center_of_mass(model, s))(traj.states))
    vcom0 = np.asarray(sdjax.center_of_mass_velocity(model, state))
    x0 = np.concatenate([com0, vcom0 - np.cross(omega, com0)])  # Hill-frame initial CoM state
    for t, c in zip(np.asarray(traj.time)[::25], com[::25]):
        hill = (scipy.linalg.expm(_cw_matrix(n) * t) @ x0)[:3]
        rot = np.array([[np.cos(n * t), -np.sin(n * t), 0.0], [np.sin(n * t), np.cos(n * t), 0.0], [0.0, 0.0, 1.0]])
        # Same bound as in the Hill frame (RK4 error ~1e-8 of the ~100 m excursion).
        np.testing.assert_allclose(c, rot @ hill, rtol=0, atol=1e-7 * 100.0)


def _rigid_body(inertia):
    return sdjax.Model(
        parent=(),
        joint_type=(),
        base_mass=500.0,
        base_inertia=np.diag(inertia),
        link_mass=np.zeros(0),
        link_inertia=np.zeros((0, 3, 3)),
        parent_centroid_to_joint=np.zeros((0, 3)),
        centroid_to_joint=np.zeros((0, 3)),
        name="rigid_body",
    )


def _pitch_history(inertia, pitch0, n, dt, steps):
    model = _rigid_body(inertia)
    state = sdjax.make_state(model, base_rpy=[0.0, 0.0, pitch0])
    # dt as an array: one compiled rollout serves every call (a Python float is a static argument).
    traj = sdjax.rollout(model, state, jnp.asarray(dt), steps, environment=clohessy_wiltshire(model, n))
    rotation = np.asarray(jax.vmap(lambda q: sdjax.quat_to_matrix(q))(traj.states.base_quaternion))
    roll_yaw = np.abs(rotation[:, 2, :2]).max()  # the body z axis stays on the orbit normal
    return np.asarray(traj.time), np.arctan2(rotation[:, 1, 0], rotation[:, 0, 0]), roll_yaw


def test_pitch_libration_frequency():
    """Principal axes along (radial, along-track, normal), I_yy > I_xx: small pitch theta about
    the orbit normal obeys I_zz theta'' = -3 n^2 (I_yy - I_xx) theta (Hughes, Spacecraft
    Attitude Dynamics, ch. 9, in these axes)."""
    inertia = (100.0, 300.0, 350.0)
    n = 1e-3
    omega_p = n * np.sqrt(3 * (inertia[1] - inertia[0]) / inertia[2])
    period = 2 * np.pi / omega_p
    dt = period / 200
    t, pitch, roll_yaw = _pitch_history(inertia, 1e-3, n, dt, 400)  # two libration periods
    # theta0 = 1e-3 rad: the sin(theta) cos(theta) nonlinearity shifts the frequency by ~theta0^2 / 4;
    # RK4 with 200 steps per period is exact to ~1e-9. The comparison is to 1e-5 rad of 1e-3.
    np.testing.assert_allclose(pitch, 1e-3 * np.cos(omega_p * t), rtol=0, atol=1e-8)
    assert roll_yaw < 1e-12  # planar motion: roll and yaw stay zero (round-off)


def test_pitch_unstable_orientation_diverges():
    """With I_xx > I_yy (the minimum axis along-track) the pitch equilibrium is unstable:
    theta = theta0 cosh(lambda t), lambda = n sqrt(3 (I_xx - I_yy) / I_zz)."""
    inertia = (300.0, 100.0, 350.0)
    n = 1e-3
    rate = n * np.sqrt(3 * (inertia[0] - inertia[1]) / inertia[2])
    t, pitch, _ = _pitch_history(inertia, 1e-6, n, 0.05 / rate, 400)  # 20 / lambda
    expected = 1e-6 * np.cosh(rate * t)
    # Compare in the linear regime, theta < 1e-2 rad (the run goes on into tumbling), where the sin cos nonlinearity is ~theta^2 / 1.5 < 1e-4 relative; RK4 (lambda dt = 0.05)
    # adds ~1e-7 per e-folding.
    linear = expected < 1e-2
    np.testing.assert_allclose(pitch[linear], expected[linear], rtol=1e-4)
    assert pitch[linear][-1] > 1e3 * pitch[0]


def test_tidal_forces_about_com_sum_to_zero():
    model = _model()
    state = _state(model)
    forces, _ = gravity_gradient_wrenches(model, state, N_ORBIT, jnp.array([0.0, 1.0, 0.0]), about="com")
    # A linear field about the CoM: sum m_i T (c_i - c) = 0 to round-off (forces ~1e-5 N).
    assert np.abs(np.asarray(forces).sum(0)).max() < 1e-18
    assert np.abs(np.asarray(forces)).max() > 1e-7


def test_combined_environment_equals_sum_of_terms():
    model = _model()
    state = _state(model)
    a, b = GravityGradient(model, N_ORBIT), RotatingFrame(model, [0.0, 0.0, N_ORBIT])
    summed = combine_environments(a, b)(0.0, state)
    separate = jax.tree.map(jnp.add, a(0.0, state), b(0.0, state))
    for x, y in zip(jax.tree.leaves(summed), jax.tree.leaves(separate)):
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-18)  # same sum, different order


def test_gradient_through_rollout_matches_finite_differences():
    model = random_model(4, 1)
    state = sdjax.make_state(model, base_position=[20.0, 10.0, -5.0], base_angular_velocity=[0.01, 0.0, -0.01], q=[0.2])

    @jax.jit
    def loss(params):
        n, vy = params[0], params[1]
        s = _replace(state, base_linear_velocity=jnp.stack([jnp.zeros_like(vy), vy, jnp.zeros_like(vy)]))
        traj = sdjax.rollout(model, s, 10.0, 10, environment=clohessy_wiltshire(model, n))
        final = jax.tree.map(lambda x: x[-1], traj.states)
        return sdjax.center_of_mass(model, final)[0] + 10.0 * jnp.sum(final.q**2)

    params = jnp.array([1.5e-3, -0.05])
    grad = np.asarray(jax.jit(jax.grad(loss))(params))
    assert np.all(np.isfinite(grad))
    for k, h in enumerate((1e-7, 1e-4)):
        fd = central_difference(loss, params, k, h)
        # 1e-6 relative: central differences with h chosen so that truncation (~h^2) and
        # round-off (~1e-16 |loss| / h) are both below it.
        np.testing.assert_allclose(grad[k], fd, rtol=1e-6)


def test_bad_parameters_raise():
    model = _model()
    with pytest.raises(ValueError, match="GravityGradient: mean_motion: must be positive"):
        GravityGradient(model, 0.0)
    with pytest.raises(ValueError, match="GravityGradient: mean_motion: must be positive"):
        GravityGradient(model, -1e-3)
    with pytest.raises(ValueError, match="clohessy_wiltshire: mean_motion: must be positive and finite"):
        clohessy_wiltshire(model, float("nan"))
    with pytest.raises(ValueError, match="clohessy_wiltshire_solution: mean_motion: must be positive"):
        clohessy_wiltshire_solution(-1.0, np.zeros(3), np.zeros(3), 1.0)
    with pytest.raises(ValueError, match="GravityGradient: frame: unknown value 'eci'"):
        GravityGradient(model, 1e-3, frame="eci")
    with pytest.raises(ValueError, match="GravityGradient: about: unknown value 'base'"):
        GravityGradient(model, 1e-3, about="base")
    with pytest.raises(ValueError, match="angular_velocity expected shape"):
        RotatingFrame(model, [0.0, 1e-3])
    with pytest.raises(ValueError, match="angular_velocity must be finite"):
        RotatingFrame(model, [0.0, 0.0, float("inf")])
    with pytest.raises(ValueError, match="at least one"):
        combine_environments()
    with pytest.raises(TypeError, match="combine_environments: term 1: expected a function"):
        combine_environments(GravityGradient(model, 1e-3), 3.0)
