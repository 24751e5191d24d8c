"""Arm flexibility (seed 004 section 3, appendix B) and static joint loads (section 4, eq A-20).

References: closed-form cantilever compliances (a chain of collinear beams is one longer beam),
a NumPy re-derivation of eq B-6 in the seed's own [moment; force] order, the literal
row/column-deletion formula of eq 3-7 against the Schur-complement identity, the seed's written
out M1..M9 / V1..V9 formulas, virtual work (tau = J^T F) and member equilibrium.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import sdjax.massless_arm as ma
from sdjax.models.srms import GRAPPLE_Q, srms_flexibility, srms_system
from sdjax.rotation import rotation_vector_to_matrix, skew

RNG = np.random.default_rng(0)


@pytest.fixture(scope="module")
def srms():
    return srms_system()


def random_terms(rng, n):
    return np.asarray(
        ma.cantilever_terms(
            rng.uniform(0.5, 3.0, n), rng.uniform(1e5, 1e6, n), rng.uniform(1e5, 1e6, n), rng.uniform(1e5, 1e6, n)
        )
    )


def test_beam_flexibility_sparsity_matches_eq_b7():
    terms = np.arange(1.0, 8.0) * np.array([1, 1, 1, -1, 1, 1, 1])  # y26 negative
    terms[3], terms[4] = -0.5, 0.5  # keep the bending blocks positive definite
    y = np.asarray(ma.beam_flexibility(terms))
    seed = np.zeros((6, 6))  # eq B-7, seed order [M; F] -> [rotation; displacement], 1-based (i, j)
    for (i, j), v in {
        (1, 1): terms[0],
        (2, 2): terms[1],
        (3, 3): terms[2],
        (2, 6): terms[3],
        (3, 5): terms[4],
        (5, 5): terms[5],
        (6, 6): terms[6],
    }.items():
        seed[i - 1, j - 1] = seed[j - 1, i - 1] = v
    perm = [3, 4, 5, 0, 1, 2]  # sdjax order [F; M] -> [displacement; rotation]
    np.testing.assert_array_equal(y, seed[np.ix_(perm, perm)])
    assert y[0, 0] == 0  # no axial compliance
    assert np.count_nonzero(np.triu(y)) == 7  # seven independent terms


def test_cantilever_terms_are_beam_theory():
    """A tip force F_z on a cantilever along x: w = F L^3 / 3EI, slope about y = -F L^2 / 2EI."""
    length, ei_y, ei_z, gj = 2.0, 3e5, 5e5, 2e5
    y = np.asarray(ma.beam_flexibility(ma.cantilever_terms(length, ei_y, ei_z, gj)))
    load = np.array([0.0, 0.0, 10.0, 0.0, 0.0, 0.0])
    # The cantilever terms are these closed forms, so only the matrix product rounds: 1e-15.
    np.testing.assert_allclose(
        y @ load, [0, 0, 10 * length**3 / (3 * ei_y), 0, -10 * length**2 / (2 * ei_y), 0], rtol=1e-15
    )
    load = np.array([0.0, 10.0, 0.0, 4.0, 0.0, 0.0])  # F_y and a torque about x
    np.testing.assert_allclose(
        y @ load, [0, 10 * length**3 / (3 * ei_z), 0, 4 * length / gj, 0, 10 * length**2 / (2 * ei_z)], rtol=1e-15
    )


def test_chain_of_collinear_beams_is_one_beam():
    """Eq B-6 with the shift L_in: two uniform beams end to end (same section) have exactly
    the compliance of one beam of the summed length, in any orientation."""
    ei_y, ei_z, gj = 4e5, 7e5, 3e5
    a, b = 1.3, 2.1
    ys = np.asarray(ma.beam_flexibility(ma.cantilever_terms(np.array([a, b]), ei_y, ei_z, gj)))
    rot = np.asarray(rotation_vector_to_matrix(jnp.array([0.3, -0.7, 1.1])))
    root = np.array([1.0, 2.0, -0.5])
    ends = np.stack([root + rot @ [a, 0, 0], root + rot @ [a + b, 0, 0]])
    y = np.asarray(ma.chain_flexibility(ys, np.stack([rot, rot]), ends, ends[1]))
    one = np.asarray(ma.beam_flexibility(ma.cantilever_terms(a + b, ei_y, ei_z, gj)))
    r6 = np.kron(np.eye(2), rot)
    np.testing.assert_allclose(y, r6 @ one @ r6.T, atol=1e-12 * np.abs(one).max())  # round-off of a few products


def test_chain_flexibility_matches_seed_order_rederivation():
    """Eq B-6 written as in appendix B: [M; F] loads, L_in = [[E, 0], [-r x, E]] acting on
    [rotation; displacement] (eqs A-6, A-7), summed in NumPy."""
    rng = np.random.default_rng(1)
    nb = 4
    terms = random_terms(rng, nb)
    rots = np.stack([np.asarray(rotation_vector_to_matrix(jnp.asarray(rng.normal(size=3)))) for _ in range(nb)])
    ends = rng.normal(size=(nb, 3))
    tip = rng.normal(size=3)
    y = np.asarray(ma.chain_flexibility(ma.beam_flexibility(terms), rots, ends, tip))
    total = np.zeros((6, 6))
    for t, c, e in zip(terms, rots, ends):
        y11, y22, y33, y26, y35, y55, y66 = t
        yi = np.zeros((6, 6))
        yi[0, 0], yi[1, 1], yi[2, 2], yi[4, 4], yi[5, 5] = y11, y22, y33, y55, y66
        yi[1, 5] = yi[5, 1] = y26
        yi[2, 4] = yi[4, 2] = y35
        shift = np.block([[np.eye(3), np.zeros((3, 3))], [-np.asarray(skew(jnp.asarray(tip - e))), np.eye(3)]])
        c6 = np.kron(np.eye(2), c)
        total += shift @ c6 @ yi @ c6.T @ shift.T
    perm = [3, 4, 5, 0, 1, 2]
    np.testing.assert_allclose(y, total[np.ix_(perm, perm)], atol=1e-12 * np.abs(total).max())  # round-off


def test_joint_flexibility_and_modes(srms):
    """Eqs 3-1 .. 3-7 on the SRMS at the grapple pose."""
    flex = srms_flexibility()
    q = GRAPPLE_Q
    y = np.asarray(ma.arm_flexibility_matrix(srms, flex, q))
    # Y = sum L Y_i L^T is symmetric by construction; its entries are ~1e-7 m/N, so 1e-20 is round-off.
    np.testing.assert_allclose(y, y.T, atol=1e-20)
    assert np.linalg.eigvalsh(y)[0] > 0  # a bent arm: the axially rigid beams still give a full-rank Y
    jac = np.asarray(ma.arm_kinematics(srms, q).jacobian)
    yj = np.asarray(ma.joint_flexibility_matrix(srms, flex, q))
    # eq 3-4: J YJ J^T = Y; solves with cond(J) ~ 16 (squared in the damped solver): 1e-10.
    np.testing.assert_allclose(jac @ yj @ jac.T, y, atol=1e-10 * np.abs(y).max())
    # eqs 3-1 .. 3-3 with the passive torques of eq 3-6: J^T P_e = -tau_F, Y P_e = J dtheta.
    dtheta = 1e-3 * np.random.default_rng(2).normal(size=6)
    tau_f = np.asarray(ma.passive_flexibility_torques(yj, dtheta))
    load = np.linalg.solve(jac.T, -tau_f)
    np.testing.assert_allclose(y @ load, jac @ dtheta, atol=1e-9 * np.abs(jac @ dtheta).max())
    # eq 3-7 literally (delete row and column i) and the Schur identity 1 / (YJ^-1)_ii.
    terms = np.asarray(ma.motor_flexibility_terms(yj))
    literal = []
    for i in range(6):
        keep = [j for j in range(6) if j != i]
        y22, y21 = yj[np.ix_(keep, keep)], yj[i, keep]
        literal.append(yj[i, i] - y21 @ np.linalg.solve(y22, y21))
    np.testing.assert_allclose(terms, literal, rtol=1e-9)  # two solves of a 5x5 with cond ~1e3
    np.testing.assert_allclose(terms, 1.0 / np.diag(np.linalg.inv(yj)), rtol=1e-9)
    assert np.all(terms > 0) and np.all(terms <= np.diag(yj) * (1 + 1e-12))  # other joints held: stiffer


def test_passive_mode_controller_is_eq_3_6(srms):
    flex = srms_flexibility()
    neutral = GRAPPLE_Q
    law = ma.PassiveFlexibility(srms, flex, neutral, damping=np.full(6, 10.0))
    q = neutral + 1e-3 * np.arange(6)
    qd = np.full(6, 0.01)
    yj = ma.joint_flexibility_matrix(srms, flex, q)
    expected = -np.linalg.solve(np.asarray(yj), q - neutral) - 10.0 * qd
    # Two solves with YJ (condition ~1e3): agreement to ~1e-12, 1e-9 leaves margin.
    np.testing.assert_allclose(np.asarray(law(0.0, jnp.asarray(q), jnp.asarray(qd))), expected, rtol=1e-9)


def test_bad_flexibility_inputs(srms):
    good = np.asarray(ma.cantilever_terms(1.0, 1e5, 1e5, 1e5))
    bad = good.copy()
    bad[3] = -bad[3]  # y26 > 0
    with pytest.raises(ValueError, match="y26 <= 0"):
        ma.beam_flexibility(bad)
    bad = good.copy()
    bad[0] = -1.0
    with pytest.raises(ValueError, match="y11 must be positive"):
        ma.beam_flexibility(bad)
    bad = good.copy()
    bad[3] = -10 * np.sqrt(good[1] * good[6])
    with pytest.raises(ValueError, match="not a flexibility matrix"):
        ma.beam_flexibility(bad)
    with pytest.raises(ValueError, match="expected shape"):
        ma.beam_flexibility(np.ones(6))
    with pytest.raises(ValueError, match=r"expected shape \(2, 7\)"):
        ma.ArmFlexibility(np.stack([good] * 3), (1, 2), np.stack([np.eye(3)] * 2), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="body indices"):
        ma.ArmFlexibility(good[None], (7,), np.eye(3)[None], np.zeros((1, 3)))
    with pytest.raises(ValueError, match="expected shape"):
        ma.motor_flexibility_terms(np.eye(5))


# ------------------------------------------------------------------------------------------
# Section 4: static loads.


def test_static_loads_match_seed_formulas(srms):
    """RMLOAD's M1..M9, V1..V9 written out as in section 4 (orbiter-frame r_kB, member frames T_kB)."""
    q = GRAPPLE_Q + 0.1 * np.random.default_rng(4).normal(size=6)
    kin = ma.arm_kinematics(srms, q)
    wrench = np.asarray(ma.end_effector_wrench(srms, q, np.array([300.0, -200.0, 150.0, 80.0, -60.0, 40.0])))
    fe, me = wrench[:3], wrench[3:]
    r = {
        k: np.asarray(kin.joint_position[k - 1]) for k in range(2, 6)
    }  # r2B shoulder, r3B elbow, r4B wrist pitch, r5B wrist yaw
    r[6] = np.asarray(kin.tip_position)  # r6B: where M_e, F_e act
    t = {k: np.asarray(kin.link_rotation[k - 1]).T for k in (2, 3, 4, 5)}  # T2B shoulder yaw .. T5B wrist
    t[6] = np.asarray(kin.link_rotation[6]).T  # T6B hand (link 6; wrist roll sits at the wrist yaw joint)
    mom = lambda k: me + np.cross(r[6] - r[k], fe)  # noqa: E731
    expected_m = [
        -t[2] @ mom(2),
        t[3] @ mom(2),
        -t[3] @ mom(3),
        t[4] @ mom(3),
        -t[4] @ mom(4),
        t[5] @ mom(4),
        -t[5] @ mom(5),
        t[6] @ mom(5),
        -t[6] @ me,
    ]
    expected_v = [
        -t[2] @ fe,
        t[3] @ fe,
        -t[3] @ fe,
        t[4] @ fe,
        -t[4] @ fe,
        t[5] @ fe,
        -t[5] @ fe,
        t[6] @ fe,
        -t[6] @ fe,
    ]
    m, v = ma.seed_joint_loads(srms, q, wrench)
    scale = np.abs(expected_m).max()
    np.testing.assert_allclose(np.asarray(m), expected_m, atol=1e-12 * scale)  # same products, different order
    np.testing.assert_allclose(np.asarray(v), expected_v, atol=1e-12 * np.abs(fe).max())


@pytest.mark.parametrize("seed", (0, 1, 2))
def test_static_loads_virtual_work_and_equilibrium(srms, seed):
    """tau_k is the inboard moment of link k about its joint axis (z of its frame): tau = J^T F,
    and every massless link is in equilibrium between its two ends."""
    rng = np.random.default_rng(seed)
    q = GRAPPLE_Q + 0.3 * rng.normal(size=6)
    tau = 500.0 * rng.normal(size=6)
    wrench = ma.end_effector_wrench(srms, q, tau)
    loads = ma.member_loads(srms, q, wrench)
    np.testing.assert_allclose(
        np.asarray(loads.inboard_moment[:, 2]), tau, rtol=1e-9, atol=1e-9 * np.abs(tau).max()
    )  # J^-T then J^T
    kin = ma.arm_kinematics(srms, q)
    rot = np.asarray(kin.link_rotation[1:])
    inboard = np.asarray(kin.joint_position)
    outboard = np.vstack([inboard[1:], np.asarray(kin.tip_position)[None]])
    for k in range(6):
        f_in, f_out = rot[k] @ np.asarray(loads.inboard_force[k]), rot[k] @ np.asarray(loads.outboard_force[k])
        m_in, m_out = rot[k] @ np.asarray(loads.inboard_moment[k]), rot[k] @ np.asarray(loads.outboard_moment[k])
        scale = np.abs(np.asarray(wrench)).max() * 20.0
        np.testing.assert_allclose(f_in + f_out, 0.0, atol=1e-12 * scale)
        np.testing.assert_allclose(
            m_in + m_out + np.cross(outboard[k] - inboard[k], f_out), 0.0, atol=1e-12 * scale
        )  # moments about joint k
