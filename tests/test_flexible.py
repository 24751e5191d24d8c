"""Flexible appendages (sdjax.flexible): beams as chains of rigid segments on elastic joints.

References: the Euler-Bernoulli cantilever frequency (1.8751)^2 sqrt(EI / (mu L^4)), the
St-Venant torsion frequency (pi / 2) sqrt(GJ / (rho I_p L^2)), the discrete chain's static
tip compliance derived by hand (sum over hinges of the moment arm squared over stiffness),
energy balance of the passive joints, and finite differences.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax.flexible import (
    NODE_MASS_FRACTION,
    Beam,
    attach_beam,
    beam_layout,
    beam_tip_deflection,
    beam_tip_position,
    cantilever_frequencies,
    cantilever_model,
    elastic_energy,
    linear_modes,
)
from sdjax.rotation import rpy_to_matrix
from helpers import central_difference

BETA1 = 1.8751040687119611  # first root of cos(x) cosh(x) = -1 (clamped-free beam)


def _planar(num_segments, **kwargs):
    return Beam(2.0, 3.0, 100.0, num_segments, planar=True, **kwargs)


def _first_frequency(beam):
    model = cantilever_model(beam)
    return float(linear_modes(model, beam_layout(model).all_joints)[0][0])


def test_bending_frequency_converges_with_second_order():
    exact = BETA1**2 * np.sqrt(100.0 / (3.0 * 2.0**4))
    errors = [abs(_first_frequency(_planar(n)) / exact - 1.0) for n in (4, 8, 16)]
    orders = np.log2(np.asarray(errors[:-1]) / np.asarray(errors[1:]))
    # Midpoint lumping is second order: observed orders 1.97-1.99 (measured); 1.9 leaves room
    # for the O(N^-4) terms at N = 4, and the N = 16 error (1.8e-3 measured) must be small.
    assert np.all(orders > 1.9), (errors, orders)
    assert errors[-1] < 2.5e-3
    assert float(cantilever_frequencies(_planar(4))["bend_z"]) == pytest.approx(exact, rel=1e-14)


def test_uniform_lumping_is_first_order():
    exact = BETA1**2 * np.sqrt(100.0 / (3.0 * 2.0**4))
    errors = [abs(_first_frequency(_planar(n, lumping="uniform")) / exact - 1.0) for n in (4, 8, 16)]
    orders = np.log2(np.asarray(errors[:-1]) / np.asarray(errors[1:]))
    # k = EI / l at the root too: first order (observed 0.85-0.92 at these N, measured), and
    # worse than the midpoint scheme by an order of magnitude at N = 16.
    assert np.all((orders > 0.7) & (orders < 1.2)), (errors, orders)
    assert errors[-1] > 10 * abs(_first_frequency(_planar(16)) / exact - 1.0)


def test_three_dimensional_beam_bending_and_torsion_converge():
    # Thin section (radius of gyration 2 mm on a 2 m beam): rotary inertia changes the bending
    # frequencies by ~1e-6, below the discretisation errors checked here.
    section = (3.0 * 2e-3**2, 3.0 * 1e-3**2)
    ei, gj = (100.0, 40.0), 0.02
    polar = sum(section)
    exact = {
        "bend_y": BETA1**2 * np.sqrt(ei[0] / (3.0 * 16.0)),
        "bend_z": BETA1**2 * np.sqrt(ei[1] / (3.0 * 16.0)),
        "twist": 0.5 * np.pi * np.sqrt(gj / (polar * 4.0)),
    }
    errors = {k: [] for k in exact}
    for n in (4, 8):
        beam = Beam(2.0, 3.0, ei, n, torsional_stiffness=gj, section_inertia_per_length=section)
        model = cantilever_model(beam)
        layout = beam_layout(model)
        assert layout.kinds == ("bend_z", "bend_y", "twist")
        freqs, modes = linear_modes(model, layout.all_joints)
        freqs, modes = np.asarray(freqs), np.asarray(modes)
        for kind, value in exact.items():
            # Identify each family's first mode by where its shape lives (joints of one kind).
            rows = [layout.all_joints.index(j) for j in layout.joints_of(kind)]
            share = np.sum(modes[rows] ** 2, axis=0) / np.sum(modes**2, axis=0)
            first = freqs[np.flatnonzero(share > 0.9)[0]]
            errors[kind].append(abs(first / value - 1.0))
        for kind, value in cantilever_frequencies(beam).items():
            assert float(value) == pytest.approx(exact[kind], rel=1e-12)
    for kind, (e4, e8) in errors.items():
        # Second order for every family: halving l divides the error by ~4 (3.7-3.9 measured).
        assert e8 < e4 / 3.5 and e8 < 1e-2, (kind, e4, e8)


def test_static_tip_compliance_matches_the_lumping_formula():
    """Tip load P along y on the clamped chain: q = K^-1 J^T P, tip deflection J q. Hinge j
    (at x = j l) carries the moment P (L - j l); summing (L - j l)^2 / k_j with k_0 = 2 EI / l,
    k_j = EI / l gives P L^3 / (3 EI) (1 + 1 / (2 N^2)) (the module docstring's claim)."""
    num = 4
    beam = _planar(num)
    model = cantilever_model(beam)
    state = sdjax.make_state(model)
    tip_body = beam_layout(model).segments[-1]
    # The tip is l/2 beyond the last centroid: minus its centroid-to-joint vector (body frame).
    tip = -model.centroid_to_joint[tip_body - 1]
    jac = np.asarray(sdjax.point_jacobian(model, state, tip_body, tip))[1, 6:]  # y row, joint columns
    q = jac / np.asarray(model.joint_stiffness)  # unit load
    compliance = float(jac @ q)
    expected = 2.0**3 / (3 * 100.0) * (1 + 1 / (2 * num**2))
    assert compliance == pytest.approx(expected, rel=1e-12)  # exact for the chain: round-off only
    # Hand check of the stiffnesses themselves: 2 EI / l at the root, EI / l after.
    np.testing.assert_allclose(model.joint_stiffness, [400.0, 200.0, 200.0, 200.0], rtol=1e-14)


DT = 5e-4  # s; the chain's highest mode is ~160 rad/s, so omega dt ~ 0.08


@pytest.fixture(scope="module")
def cantilever_runs():
    """Planar 4-segment cantilever on a 1e6 kg base, released bent; without and with damping."""
    out = {}
    for ratio in (0.0, 0.05):
        model = cantilever_model(_planar(4, damping_ratio=ratio))
        state = sdjax.make_state(model, q=[0.05, 0.03, -0.02, 0.01])
        traj = sdjax.rollout(model, state, jnp.asarray(DT), 6000)  # 3 s ~ 1.5 periods of mode 1
        energy = jax.vmap(lambda s, m=model: sdjax.kinetic_energy(m, s) + elastic_energy(m, s))(traj.states)
        out[ratio] = (model, traj, np.asarray(energy))
    return out


def test_energy_conserved_without_damping(cantilever_runs):
    _, _, energy = cantilever_runs[0.0]
    # RK4 dissipates ~(omega dt)^6 / 72 of a mode's energy per step: with omega dt ~ 0.08 for
    # the highest mode that is ~4e-7 of the total over the run (measured 2.9e-4 at dt = 2e-3,
    # where (omega dt)^5 is 1024 times larger).
    assert np.ptp(energy) < 2e-6 * energy[0]


def test_energy_decreases_with_structural_damping(cantilever_runs):
    model, traj, energy = cantilever_runs[0.05]
    assert np.all(np.diff(energy) <= 1e-12 * energy[0])  # monotone (round-off allowed)
    # Energy balance: dE/dt = -qd^T D qd; trapezoidal integral of the dissipation over the run.
    power = np.sum(np.asarray(model.joint_damping) * np.asarray(traj.states.qd) ** 2, axis=1)
    dissipated = np.sum(0.5 * (power[1:] + power[:-1])) * DT
    # 1e-4 relative: the trapezoid rule's O((omega dt)^2 / 12) error on the fast modes' power plus
    # RK4's own dissipation (< 1e-6).
    assert energy[0] - energy[-1] == pytest.approx(dissipated, rel=1e-4)
    assert energy[-1] < 0.9 * energy[0]  # the damping is not negligible over 3 s


def test_attach_to_a_link_of_another_model(sample_model):
    """Two beams on different bodies at offsets and rotations; geometry against a hand computation."""
    beam = Beam(1.5, 2.0, (50.0, 80.0), 3, torsional_stiffness=10.0, section_inertia_per_length=(1e-3, 2e-3))
    rpy = np.array([0.3, -0.2, 0.5])
    offset = np.array([0.1, 0.2, -0.3])
    model = attach_beam(sample_model, beam, body=2, position=offset, rpy=rpy, name="a")
    model = attach_beam(model, Beam(1.0, 1.0, 30.0, 2, planar=True), body=0, position=[0.0, 0.0, 1.0], name="b")
    n0 = sample_model.num_joints
    assert model.num_joints == n0 + 9 + 2
    assert model.link_names[n0] == "a/seg1/bend_z" and model.link_names[-1] == "b/seg2/bend_z"
    # Mass: exactly mu L per beam (the node bodies' mass is taken from the segments).
    assert float(model.total_mass) == pytest.approx(float(sample_model.total_mass) + 3.0 + 1.0, rel=1e-14)
    q_arm = np.array([0.2, -0.4, 0.3, 0.1, 0.5, -0.2])
    state = sdjax.make_state(
        model, base_rpy=[0.1, 0.2, -0.3], base_position=[1.0, 2.0, 3.0], q=np.concatenate([q_arm, np.zeros(11)])
    )
    kin_old = sdjax.forward_kinematics(
        sample_model, sdjax.make_state(sample_model, base_rpy=[0.1, 0.2, -0.3], base_position=[1.0, 2.0, 3.0], q=q_arm)
    )
    layout = beam_layout(model, "a")
    assert layout.body == 2 and layout.segments[-1] == n0 + 9
    rot = np.asarray(kin_old.rotation[2]) @ np.asarray(rpy_to_matrix(rpy))
    expected_tip = (
        np.asarray(kin_old.centroid[2]) + np.asarray(kin_old.rotation[2]) @ offset + rot @ np.array([1.5, 0.0, 0.0])
    )
    np.testing.assert_allclose(beam_tip_position(model, state, layout), expected_tip, atol=1e-12)  # round-off
    np.testing.assert_allclose(beam_tip_deflection(model, state, layout), np.zeros(3), atol=1e-12)
    # Bend the first node about the beam z axis by a small angle: the tip moves along beam y by
    # ~ L theta (rigid rotation of the whole beam about its root).
    theta = 1e-6
    bent = sdjax.make_state(
        model,
        base_rpy=[0.1, 0.2, -0.3],
        base_position=[1.0, 2.0, 3.0],
        q=np.concatenate([q_arm, [theta], np.zeros(10)]),
    )
    np.testing.assert_allclose(
        beam_tip_deflection(model, bent, layout), [0.0, 1.5 * theta, 0.0], atol=1e-11
    )  # O(theta^2) = 1e-12
    # Stiffness and tiny node bodies.
    k = np.asarray(model.joint_stiffness[n0 : n0 + 9]).reshape(3, 3)
    np.testing.assert_allclose(k[0], 2 * np.array([80.0, 50.0, 10.0]) / 0.5, rtol=1e-14)
    np.testing.assert_allclose(k[1:], np.tile(np.array([80.0, 50.0, 10.0]) / 0.5, (2, 1)), rtol=1e-14)
    masses = np.asarray(model.link_mass[n0 : n0 + 9]).reshape(3, 3)
    # The documented lumping: each node body carries NODE_MASS_FRACTION of its segment (2 kg/m x 0.5 m); exact arithmetic.
    np.testing.assert_allclose(masses[:, :2], NODE_MASS_FRACTION * 2.0 * 0.5, rtol=1e-14)


def test_frequency_gradient_is_exact():
    def first(ei):
        model = cantilever_model(Beam(2.0, 3.0, ei, 4, planar=True, damping_ratio=0.02))
        return linear_modes(model, beam_layout(model).all_joints)[0][0]

    ei = jnp.asarray(100.0)
    # omega scales with sqrt(EI) when only the stiffness changes: d omega / d EI = omega / (2 EI)
    # (the damping does not enter the undamped frequency); round-off only.
    assert float(jax.grad(first)(ei)) == pytest.approx(float(first(ei)) / 200.0, rel=1e-10)


@pytest.mark.slow
def test_rollout_gradient_matches_finite_differences():
    @jax.jit
    def tip_energy(params):
        ei, ratio = params[0], params[1]
        model = cantilever_model(Beam(2.0, 3.0, ei, 4, planar=True, damping_ratio=ratio))
        state = sdjax.make_state(model, q=jnp.array([0.05, 0.03, -0.02, 0.01]))
        traj = sdjax.rollout(model, state, 2e-3, 100)
        final = jax.tree.map(lambda x: x[-1], traj.states)
        return sdjax.kinetic_energy(model, final) + elastic_energy(model, final)

    params = jnp.array([100.0, 0.02])
    grad = np.asarray(jax.jit(jax.grad(tip_energy))(params))
    assert np.all(np.isfinite(grad))
    for k, h in enumerate((1e-3, 1e-5)):
        fd = central_difference(tip_energy, params, k, h)
        # 1e-6 relative: central-difference truncation (~h^2) and round-off (~1e-16 / h) below it.
        np.testing.assert_allclose(grad[k], fd, rtol=1e-6)


def test_flexible_satellite_structure():
    from sdjax.models.flexible_satellite import ARM_JOINTS, PADDLES, flexible_satellite, paddle_beam

    model = flexible_satellite(2, planar_paddles=True)
    assert model.num_joints == 3 + 2 * 2
    assert model.link_names[:3] == ARM_JOINTS
    # 1200 kg base + 57 kg arm + two 6 m paddles of 5 kg/m.
    assert float(model.total_mass) == pytest.approx(1200.0 + 57.0 + 2 * 30.0, rel=1e-14)
    for name, sign in zip(PADDLES, (1.0, -1.0)):
        layout = beam_layout(model, name)
        assert layout.body == 0 and layout.kinds == ("bend_z",)
        tip = beam_tip_position(model, sdjax.make_state(model), layout)
        np.testing.assert_allclose(tip, [0.0, sign * (1.1 + 6.0), 0.0], atol=1e-12)  # root 1.1 m + span 6 m
    full = flexible_satellite(2)
    assert beam_layout(full, PADDLES[0]).kinds == ("bend_z", "bend_y", "twist")
    theory = cantilever_frequencies(paddle_beam())
    # The documented design values (docstring of paddle_beam), to the quoted digits.
    assert float(theory["bend_z"]) == pytest.approx(2.51, abs=5e-3)
    assert float(theory["twist"]) == pytest.approx(4.97, abs=5e-3)


@pytest.mark.slow
def test_simulated_spectrum_matches_linear_modes():
    """FFT of a free vibration of a planar 8-segment cantilever on a heavy base: the peak lies
    at the first linear mode (within the FFT resolution)."""
    model = cantilever_model(_planar(8))
    modes = np.asarray(linear_modes(model, beam_layout(model).all_joints, base="floating")[0])
    state = sdjax.make_state(model, q=np.full(8, 0.01))
    dt, steps = 2e-3, 20000  # 40 s, 20 periods of mode 1; omega_max dt ~ 0.6
    traj = sdjax.rollout(model, state, jnp.asarray(dt), steps)
    signal = np.asarray(traj.states.q[:, -1])
    spectrum = np.abs(np.fft.rfft((signal - signal.mean()) * np.hanning(len(signal))))
    omega = 2 * np.pi * np.fft.rfftfreq(len(signal), dt)
    band = omega < 0.5 * (modes[0] + modes[1])
    peak = omega[band][np.argmax(spectrum[band])]
    # Half the frequency resolution 2 pi / 40 s = 0.157 rad/s.
    assert abs(peak - modes[0]) < 0.08
    # The heavy base makes the floating modes those of the clamped beam (base moves by mu L / 1e6).
    exact = BETA1**2 * np.sqrt(100.0 / (3.0 * 2.0**4))
    assert abs(modes[0] / exact - 1) < 1e-2  # 7.1e-3 discretisation error at N = 8 (measured)


def test_bad_parameters_raise(sample_model):
    with pytest.raises(ValueError, match="num_segments: must be an integer >= 1, got 0"):
        Beam(1.0, 1.0, 1.0, 0)
    with pytest.raises(TypeError, match="num_segments: expected an integer, got float 2.5"):
        Beam(1.0, 1.0, 1.0, 2.5)
    with pytest.raises(ValueError, match="Beam: bending_stiffness: must be positive"):
        Beam(1.0, 1.0, -1.0, 2)
    with pytest.raises(ValueError, match="Beam: bending_stiffness: must be positive"):
        Beam(1.0, 1.0, (1.0, 0.0), 2)
    with pytest.raises(ValueError, match="Beam: mass_per_length: must be positive"):
        Beam(1.0, 0.0, 1.0, 2)
    with pytest.raises(ValueError, match="Beam: length: must be positive"):
        Beam(-1.0, 1.0, 1.0, 2)
    with pytest.raises(ValueError, match="Beam: torsional_stiffness: must be positive"):
        Beam(1.0, 1.0, 1.0, 2, torsional_stiffness=-5.0, section_inertia_per_length=1e-3)
    with pytest.raises(ValueError, match="section_inertia_per_length is required"):
        Beam(1.0, 1.0, 1.0, 2, torsional_stiffness=5.0)
    with pytest.raises(ValueError, match="damping_ratio must be a non-negative"):
        Beam(1.0, 1.0, 1.0, 2, damping_ratio=-0.1)
    with pytest.raises(ValueError, match="not both"):
        Beam(1.0, 1.0, 1.0, 2, damping_ratio=0.1, damping_time=0.1)
    with pytest.raises(ValueError, match="unknown lumping"):
        Beam(1.0, 1.0, 1.0, 2, lumping="trapezoid")
    beam = Beam(1.0, 1.0, 1.0, 2, planar=True)
    with pytest.raises(ValueError, match=r"attach_beam: body: index 7 out of range; expected 0\.\.6 \(0 = base\)"):
        attach_beam(sample_model, beam, body=7)
    with pytest.raises(TypeError, match="attach_beam: body: expected a static integer index"):
        attach_beam(sample_model, beam, body=1.0)
    with pytest.raises(ValueError, match="attach_beam: rotation: expected a proper rotation"):
        attach_beam(sample_model, beam, rotation=2.0 * np.eye(3))
    with pytest.raises(ValueError, match="rpy or rotation, not both"):
        attach_beam(sample_model, beam, rpy=[0.0, 0.0, 0.0], rotation=np.eye(3))
    model = attach_beam(sample_model, beam, name="p")
    with pytest.raises(ValueError, match="already has a beam named 'p'"):
        attach_beam(model, beam, name="p")
    with pytest.raises(ValueError, match="no beam named 'q'"):
        beam_layout(model, "q")
    with pytest.raises(ValueError, match="has no 'twist' joints"):
        beam_layout(model, "p").joints_of("twist")
    with pytest.raises(ValueError, match="unknown base mode 'planar'; choose one of \\['fixed', 'floating'\\]"):
        linear_modes(model, (7, 8), base="planar")
    # The earlier spelling of the fixed base still works for one release, with a warning.
    with pytest.warns(DeprecationWarning, match='spelled base="fixed"'):
        clamped = linear_modes(model, (7, 8), base="clamped")
    np.testing.assert_array_equal(clamped[0], linear_modes(model, (7, 8), base="fixed")[0])
    with pytest.raises(ValueError, match="joints must be 1-based"):
        linear_modes(model, (0, 7))
