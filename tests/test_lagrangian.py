"""sdjax's dynamics against an independent autodiff-Lagrangian oracle (SPACEMAPLE style).

SPACEMAPLE verified SpaceDyn by deriving the moving-base equations of motion symbolically
from the Lagrangian and comparing ``H`` and ``c`` on random states (its Table 1: a 14-DOF
three-arm tree). Here :mod:`lagrangian_oracle` derives ``M = d2L/dxd2`` and
``c = (d2L/dxd dx) xd - dL/dx`` by automatic differentiation of ``L = T - V`` built from a
position-level forward kinematics of its own, and the tests check:

1. ``H`` and ``c`` of the three-arm tree on 100 random states (Table 1 style);
2. the same on random trees (n = 1, 3, 8; several seeds), the base alone (n = 0) and the
   built-in models;
3. the energy identity ``T = 1/2 nu^T H nu`` and ``sdjax.kinetic_energy`` (and
   ``sdjax.potential_energy``) against the oracle;
4. ``sdjax.forward_dynamics`` (and ``sdjax.inverse_dynamics``) against the oracle's
   equation of motion;

plus self-checks of the oracle that do not involve sdjax (single rigid body in closed form,
Rodrigues' formula and its derivatives at zero, inert padding).

Runtime: the oracle is compiled once for every model and state (topology as data, padded to
14 links; see :mod:`lagrangian_oracle`), sdjax once per topology (all quantities in one
``jit(vmap)``), both with XLA's CPU backend optimisation off (compile time dominates).

Tolerances are relative to the magnitude of the quantity compared (max-abs per state).
float64 round-off is ``eps = 2.2e-16``; both sides chain at most ~8 rotations and sum over
at most 15 bodies, and the observed disagreement is ~1e-15 relative (see the printed
tables with ``pytest -s``). ``1e-12`` (SPACEMAPLE's Table 1 level) leaves three orders of
magnitude for round-off while any modelling error (a wrong frame, sign, lever arm or
missing term) shows at O(1e-3) relative or more.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from helpers import random_state, three_arm_tree
from lagrangian_oracle import exp_so3, oracle, skew
from sdjax.models import free_flying_arm_7dof, random_model, spacedyn_sample

#: Relative tolerance of every oracle comparison: float64 round-off (observed ~1e-15) with
#: three orders of margin; see the module docstring.
RTOL = 1e-12

#: Links the oracle pads every model to (the largest model here: the 14-DOF tree).
N_PAD = 14

#: Random trees: size -> seeds. Each topology costs one sdjax compile (~1 s on a CPU), so the
#: seeds are chosen for coverage: n = 1 revolute (seed 0) and prismatic (seed 3); n = 3 a
#: PPR chain and an RRR branch; n = 8 three branched trees with 1-3 prismatic joints.
RANDOM_SEEDS = {1: (0, 3), 3: (0, 1), 8: (0, 1, 2)}
STATES_PER_CASE = 12


def _case_models() -> dict:
    models = {"three_arm_tree": three_arm_tree(0)}
    for n, seeds in RANDOM_SEEDS.items():
        for seed in seeds:
            models[f"random_n{n}_seed{seed}"] = random_model(seed, n, gravity=True, passive=False)
    models["base_alone"] = random_model(0, 0, gravity=True)
    models["spacedyn_sample"] = spacedyn_sample()
    models["free_flying_arm_7dof"] = free_flying_arm_7dof()
    return models


CASE_NAMES = tuple(_case_models())
OTHER_CASES = tuple(name for name in CASE_NAMES if name != "three_arm_tree")


def _stack(items):
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *items)


def _sdjax_terms(model, state, tau, base_acceleration, qdd):
    """Everything sdjax is asked, for one state (vmapped and jitted once per topology)."""
    return dict(
        H=sdjax.inertia_matrix(model, state),
        c=sdjax.bias_forces(model, state),
        T=sdjax.kinetic_energy(model, state),
        V=sdjax.potential_energy(model, state),
        fd=sdjax.forward_dynamics(model, state, tau),
        id=sdjax.inverse_dynamics(model, state, base_acceleration, qdd),
    )


# Backend optimisation off: compile time, not run time, is what the tests spend (see above).
_sdjax_batched = jax.jit(
    jax.vmap(_sdjax_terms, in_axes=(None, 0, 0, 0, 0)),
    compiler_options={"xla_backend_optimization_level": 0},
)


@pytest.fixture(scope="module")
def cases():
    """Per case: model, states, sdjax's results and the oracle's (one oracle call for all)."""
    models = _case_models()
    data = {}
    for name, model in models.items():
        count = 100 if name == "three_arm_tree" else STATES_PER_CASE
        states = [random_state(model, seed) for seed in range(count)]
        rng = np.random.default_rng(12345)
        n = model.num_joints
        tau = rng.normal(scale=5.0, size=(count, n))
        base_acceleration = rng.normal(size=(count, 6))
        qdd = rng.normal(size=(count, n))
        out = _sdjax_batched(model, _stack(states), jnp.asarray(tau), jnp.asarray(base_acceleration), jnp.asarray(qdd))
        data[name] = dict(
            model=model,
            states=states,
            nu=np.stack([np.asarray(s.generalized_velocity) for s in states]),
            q=np.stack([np.asarray(s.q) for s in states]).reshape(count, n),
            tau=tau,
            base_acceleration=base_acceleration,
            qdd=qdd,
            sdjax=jax.tree.map(np.asarray, out),
        )
    terms, padding = oracle([(d["model"], d["states"]) for d in data.values()], N_PAD)
    for d, t in zip(data.values(), terms):
        d["oracle"] = t
    data["_padding"] = padding
    return data


def _relative(diff: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Per-state max |diff| / max |ref| over all but the leading (state) axis."""
    axes = tuple(range(1, diff.ndim))
    return np.max(np.abs(diff), axis=axes) / np.max(np.abs(ref), axis=axes)


def _check_h_c(name: str, d: dict) -> None:
    h_s, c_s = d["sdjax"]["H"], d["sdjax"]["c"]
    h_l, c_l = d["oracle"].M, d["oracle"].c
    rel_h, rel_c = _relative(h_s - h_l, h_l), _relative(c_s - c_l, c_l)
    print(
        f"\n{name:>22s} n={d['model'].num_joints:2d} states={len(d['states']):3d}  "
        f"max|dH|={np.max(np.abs(h_s - h_l)):.2e} (rel {rel_h.max():.2e}, max|H|={np.max(np.abs(h_l)):.1e})  "
        f"max|dc|={np.max(np.abs(c_s - c_l)):.2e} (rel {rel_c.max():.2e}, max|c|={np.max(np.abs(c_l)):.1e})"
    )
    assert rel_h.max() < RTOL, f"{name}: H differs from the Lagrangian mass matrix, relative {rel_h.max():.3e}"
    assert rel_c.max() < RTOL, f"{name}: c differs from the Lagrangian bias force, relative {rel_c.max():.3e}"
    # The oracle's M is itself a valid inertia matrix (symmetric to round-off, positive definite).
    assert np.max(np.abs(h_l - np.swapaxes(h_l, 1, 2))) <= RTOL * np.max(np.abs(h_l))
    assert np.min(np.linalg.eigvalsh(h_l)) > 0.0


# ------------------------------------------------------------------------------------------
# 1. SPACEMAPLE Table 1: the 14-DOF three-arm tree (gravity, one prismatic joint), 100 states.


def test_three_arm_tree_table1(cases):
    d = cases["three_arm_tree"]
    assert d["model"].num_joints == 14 and "P" in d["model"].joint_type
    assert np.any(np.asarray(d["model"].gravity) != 0.0)
    assert len(d["states"]) == 100
    _check_h_c("three_arm_tree", d)


# ------------------------------------------------------------------------------------------
# 2. Random trees (several sizes and seeds), the base alone and the built-in models.


@pytest.mark.parametrize("name", OTHER_CASES)
def test_inertia_and_bias_match_lagrangian(cases, name):
    _check_h_c(name, cases[name])


# ------------------------------------------------------------------------------------------
# 3. Energies.


@pytest.mark.parametrize("name", CASE_NAMES)
def test_energy_identity(cases, name):
    d = cases[name]
    t_oracle = d["oracle"].T
    nu = d["nu"]
    quadratic_oracle = 0.5 * np.einsum("bi,bij,bj->b", nu, d["oracle"].M, nu)
    quadratic_sdjax = 0.5 * np.einsum("bi,bij,bj->b", nu, d["sdjax"]["H"], nu)
    # Kinetic energies are positive sums of positive terms: relative round-off ~1e-15.
    np.testing.assert_allclose(quadratic_oracle, t_oracle, rtol=RTOL, atol=0)
    np.testing.assert_allclose(quadratic_sdjax, t_oracle, rtol=RTOL, atol=0)
    np.testing.assert_allclose(d["sdjax"]["T"], t_oracle, rtol=RTOL, atol=0)
    # V = -sum m g . r can cancel to ~0: compare against the size of its terms, bounded by
    # M_total |g| (|r0| + reach), reach = sum over links of |c_parent,i| + |c_ii| (+ |q_i| if
    # prismatic) >= the distance of any centroid from r0 (triangle inequality along the path).
    model = d["model"]
    r0 = np.stack([np.asarray(s.base_position) for s in d["states"]])
    prismatic = np.array([t == "P" for t in model.joint_type], dtype=bool)
    reach = (
        np.sum(np.linalg.norm(np.asarray(model.parent_centroid_to_joint), axis=-1))
        + np.sum(np.linalg.norm(np.asarray(model.centroid_to_joint), axis=-1))
        + np.sum(np.abs(d["q"][:, prismatic]), axis=1)
    )
    scale = float(model.total_mass) * np.linalg.norm(np.asarray(model.gravity)) * (np.linalg.norm(r0, axis=1) + reach)
    assert np.all(np.abs(d["sdjax"]["V"] - d["oracle"].V) <= RTOL * scale)


# ------------------------------------------------------------------------------------------
# 4. Forward (and inverse) dynamics against the oracle's equation of motion.


@pytest.mark.parametrize("name", CASE_NAMES)
def test_forward_dynamics_satisfies_lagrange_equations(cases, name):
    d = cases[name]
    model = d["model"]
    m, c = d["oracle"].M, d["oracle"].c
    base_acc, qdd = d["sdjax"]["fd"]
    acc = np.concatenate([base_acc, qdd], axis=1)
    # Generalized force: no base force/torque, tau plus the (independently computed) passive
    # joint torques -K q - D qd (zero for these models, kept for generality).
    passive = -np.asarray(model.joint_stiffness) * d["q"] - np.asarray(model.joint_damping) * d["nu"][:, 6:]
    applied = np.concatenate([np.zeros((len(acc), 6)), d["tau"] + passive], axis=1)
    residual = np.einsum("bij,bj->bi", m, acc) + c - applied
    # A Cholesky solve is backward stable: its residual is ~eps * (|H| |a| + |rhs|), to which
    # the ~1e-15 relative H/c disagreement adds; scale by the size of the terms.
    scale = np.max(np.einsum("bij,bj->bi", np.abs(m), np.abs(acc)) + np.abs(c) + np.abs(applied), axis=1)
    rel = np.max(np.abs(residual), axis=1) / scale
    print(f"\n{name:>22s} forward-dynamics residual (rel) {rel.max():.2e}")
    assert rel.max() < RTOL, f"{name}: forward_dynamics violates M a + c = Q, relative {rel.max():.3e}"

    # Inverse dynamics: [F0; N0; tau] = M a + c - [0; tau_passive] for arbitrary a. Same
    # scale argument (a product and a sum of the compared terms).
    acc = np.concatenate([d["base_acceleration"], d["qdd"]], axis=1)
    expected = np.einsum("bij,bj->bi", m, acc) + c - np.concatenate([np.zeros((len(acc), 6)), passive], axis=1)
    base_wrench, tau = d["sdjax"]["id"]
    got = np.concatenate([base_wrench, tau], axis=1)
    scale = np.max(np.einsum("bij,bj->bi", np.abs(m), np.abs(acc)) + np.abs(c), axis=1)
    rel = np.max(np.abs(got - expected), axis=1) / scale
    assert rel.max() < RTOL, f"{name}: inverse_dynamics differs from M a + c, relative {rel.max():.3e}"


# ------------------------------------------------------------------------------------------
# Self-checks of the oracle (no sdjax involved).


def test_oracle_padding_is_inert(cases):
    # Dummy links have zero mass and inertia: their rows/columns are exactly zero (not merely
    # small), which shows they cannot perturb the real block.
    assert cases["_padding"] == 0.0


def test_oracle_single_rigid_body_closed_form(cases):
    """Base alone: M = diag(m E, A I A^T), c = (-m g, w x (A I A^T) w) (Newton and Euler)."""
    d = cases["base_alone"]
    model = d["model"]
    mass, gravity = float(model.base_mass), np.asarray(model.gravity)
    for k, state in enumerate(d["states"]):
        x, y, z, w0 = np.asarray(state.base_quaternion)
        v = np.array([x, y, z])
        a = (
            (w0 * w0 - v @ v) * np.eye(3)
            + 2.0 * np.outer(v, v)
            + 2.0 * w0 * np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])
        )
        inertia = a @ np.asarray(model.base_inertia) @ a.T
        w = np.asarray(state.base_angular_velocity)
        m_expected = np.zeros((6, 6))
        m_expected[:3, :3] = mass * np.eye(3)
        m_expected[3:, 3:] = inertia
        c_expected = np.concatenate([-mass * gravity, np.cross(w, inertia @ w)])
        # Closed form vs autodiff of the same energy: round-off only (scale of the terms).
        np.testing.assert_allclose(d["oracle"].M[k], m_expected, rtol=0, atol=RTOL * np.abs(m_expected).max())
        np.testing.assert_allclose(d["oracle"].c[k], c_expected, rtol=0, atol=RTOL * np.abs(c_expected).max())


def _expm_reference(matrix: np.ndarray) -> np.ndarray:
    """General matrix exponential in NumPy: scaling and squaring of a 30-term Taylor series
    (accurate to a few eps for the norms used here)."""
    squarings = max(0, int(np.ceil(np.log2(max(np.abs(matrix).sum(axis=1).max(), 1e-300)))) + 1)
    scaled = matrix / 2.0**squarings
    result, term = np.eye(3), np.eye(3)
    for k in range(1, 30):
        term = term @ scaled / k
        result = result + term
    for _ in range(squarings):
        result = result @ result
    return result


@jax.jit
def _rodrigues_probe(phis):
    zero = jnp.zeros(3, phis.dtype)
    return jax.vmap(exp_so3)(phis), jax.jacfwd(exp_so3)(zero), jax.hessian(exp_so3)(zero)


def test_oracle_rodrigues():
    # Values against a general matrix exponential on both sides of the series switch
    # (|phi|^2 = 1e-3); derivatives at 0: d exp/dphi_i = K_i, d2/dphi_i dphi_j = (K_i K_j + K_j K_i)/2.
    rng = np.random.default_rng(0)
    phis = np.stack([rng.normal(size=3) * scale for scale in (0.0, 1e-9, 1e-3, 0.015, 0.02, 0.1, 1.0, 3.0)])
    values, jac, hess = jax.tree.map(np.asarray, _rodrigues_probe(jnp.asarray(phis)))
    for phi, value in zip(phis, values):
        k = np.array([[0.0, -phi[2], phi[1]], [phi[2], 0.0, -phi[0]], [-phi[1], phi[0], 0.0]])
        # Both are float64 evaluations of the same entire function; entries are <= 1 and the
        # series terms <= e^|phi| ~ 20 at |phi| = 5: round-off stays below ~1e-14.
        np.testing.assert_allclose(value, _expm_reference(k), rtol=0, atol=1e-14)
    basis = [np.asarray(skew(jnp.asarray(e))) for e in np.eye(3)]
    for i in range(3):
        np.testing.assert_array_equal(jac[:, :, i], basis[i])  # exact: the series branch is linear in K
        for j in range(3):
            # 1/2 (K_i K_j + K_j K_i) has entries 0, +-1/2, -1: exact in binary floating point.
            np.testing.assert_array_equal(hess[:, :, i, j], 0.5 * (basis[i] @ basis[j] + basis[j] @ basis[i]))
