"""Tests of sdjax.lagrange: explicit Lagrangian dynamics (seed 002, SPACEMAPLE).

1. Table 1 of seed 002: on the 14-joint three-arm tree (one prismatic joint, gravity; seed
   002's "14-d.o.f." system counted the base's 6, this one has 20), over 100 random states
   (plus a state at rest and the linearity probes, below), the Lagrangian
   ``H`` and ``C`` agree with the recursive :func:`sdjax.inertia_matrix` (composite bodies) and
   :func:`sdjax.bias_forces` (Newton-Euler); so do the fixed-base terms (``H_m`` and the bias at
   zero base twist), the gravity vector and the energies.
2. The factored form ``C = C~ nu + g`` (eq 18): ``C~ nu + g`` equals the recursive bias,
   ``dH/dt - 2 C~`` is skew-symmetric with ``dH/dt`` the derivative of the *recursive*
   ``H(state(t))`` along the motion, and ``C~`` is linear in ``nu``.
3. The moving-base checks of 1-2 on a random tree with branches and three prismatic joints.
4. The public functions called directly (``eqx.filter_jit``) and under ``jit(vmap)``; float32,
   with a single-precision tolerance; values at rest, at the identity attitude and ``q = 0``
   (in every batch), and finite gradients there; a ``ValueError`` for a state of the wrong size.
5. Seed 002 section 5 (eqs 24a-b) on a two-arm tree: which bodies' mass properties reach which
   element of the fixed-base ``H_m``, the floating-base ``H`` and the free-floating ``H*``.

Tolerances are relative to the size of the quantity compared (max-abs per state). Both sides
are float64 evaluations of the same physics by different algorithms (autodiff of energies vs
recursions); they chain at most ~6 rotations and sum over at most 15 bodies, and the observed
disagreement is ~1e-15 (print with ``pytest -s``). ``1e-12``, the level of seed 002's Table 1,
leaves three orders of margin for round-off, while any modelling error (a frame, sign, lever
arm or missing term) shows at 1e-3 or more.

Runtime: each topology compiles one ``jit(vmap)`` of everything compared, with XLA's CPU
backend optimisation off (compile time, not run time, is what these tests spend; it changes
no arithmetic). Second derivatives of the kinematics make each compile ~10 s of CPU, so the
file uses few topologies: the three-arm tree, one random tree, a 2-link model, a two-arm tree.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from helpers import random_state, three_arm_tree, tree_with_topology
from sdjax.lagrange import (
    MassDependence,
    coriolis_matrix,
    lagrangian_terms,
    mass_dependence_table,
    mass_parameter_dependence,
)
from sdjax.models import random_model
from sdjax.rotation import quat_multiply, rotation_vector_to_quat

#: Relative tolerance of every float64 comparison (see the module docstring).
RTOL = 1e-12

_FAST_COMPILE = {"xla_backend_optimization_level": 0}

#: A random tree (seed, links) beside the three-arm tree: links 1, 3 and 5 on the base, two
#: branches on link 1, three prismatic joints (two in a row). One topology per compile: each
#: costs ~10 s of CPU, so one well-chosen tree rather than many.
RANDOM_TREE = (8, 8)

#: States of the random tree; the three-arm tree gets 100 (Table 1 style).
STATES_PER_TREE = 10

#: Linearity probes appended to every batch: C~ at nu_a + 2 nu_b vs C~(nu_a) + 2 C~(nu_b).
LINEARITY_PROBES = 5


def _stack(items):
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *items)


def _with_velocity(state: sdjax.State, nu) -> sdjax.State:
    """``state`` (or a stacked batch of states) with the generalized velocity ``nu``."""
    nu = jnp.asarray(nu, state.q.dtype)
    return eqx.tree_at(
        lambda s: (s.base_linear_velocity, s.base_angular_velocity, s.qd),
        state,
        (nu[..., :3], nu[..., 3:6], nu[..., 6:]),
    )


def _velocities(states: sdjax.State) -> np.ndarray:
    """``(batch, 6 + n)`` generalized velocities of a stacked batch."""
    return np.concatenate([states.base_linear_velocity, states.base_angular_velocity, states.qd], axis=-1)


def _states(model: sdjax.Model, count: int) -> sdjax.State:
    """A stacked batch: ``count`` random states; a state at rest at the identity attitude with
    ``q = 0`` (index ``count``); then the linearity probes with the positions of states
    ``0..P-1``: velocities ``b`` (indices ``count + 1 + k``) and ``a + 2 b`` (``count + 1 + P + k``),
    ``a`` the velocity of state ``k``."""
    states = _stack([random_state(model, seed) for seed in range(count)] + [sdjax.make_state(model)])
    p = LINEARITY_PROBES
    nu_b = np.random.default_rng(99).normal(size=(p, model.num_velocities))
    positions = jax.tree.map(lambda x: jnp.concatenate([x[:p], x[:p]]), states)
    probes = _with_velocity(positions, np.concatenate([nu_b, _velocities(states)[:p] + 2.0 * nu_b]))
    return jax.tree.map(lambda x, y: jnp.concatenate([x, y]), states, probes)


def _inertia_rate(model: sdjax.Model, state: sdjax.State, fixed_base: bool):
    """``dH/dt`` of the recursive inertia matrix along the motion of ``state``: ``r0 + t v0``,
    ``A0 = exp(t skew(w0)) A0``, ``q + t qd`` (the base held still for ``fixed_base``)."""

    def inertia_at(t):
        q = state.q + t * state.qd
        if fixed_base:
            return sdjax.inertia_matrix(model, eqx.tree_at(lambda s: s.q, state, q))[6:, 6:]
        turn = rotation_vector_to_quat(t * state.base_angular_velocity)
        moved = eqx.tree_at(
            lambda s: (s.base_position, s.base_quaternion, s.q),
            state,
            (state.base_position + t * state.base_linear_velocity, quat_multiply(turn, state.base_quaternion), q),
        )
        return sdjax.inertia_matrix(model, moved)

    zero = jnp.zeros((), state.q.dtype)
    return jax.jvp(inertia_at, (zero,), (jnp.ones_like(zero),))[1]


def _evaluate(model: sdjax.Model, state: sdjax.State, with_fixed_base: bool) -> dict:
    """Everything compared, for one state: the Lagrangian side and the recursive side."""
    out = dict(
        terms=lagrangian_terms(model, state),
        coriolis=coriolis_matrix(model, state),
        H=sdjax.inertia_matrix(model, state),
        c=sdjax.bias_forces(model, state),
        c_rest=sdjax.bias_forces(model, _with_velocity(state, jnp.zeros(model.num_velocities, state.q.dtype))),
        H_rate=_inertia_rate(model, state, fixed_base=False),
        T=sdjax.kinetic_energy(model, state),
        V=sdjax.potential_energy(model, state),
        centroids=sdjax.forward_kinematics(model, state).centroid,
    )
    if with_fixed_base:
        still = _with_velocity(state, jnp.concatenate([jnp.zeros(6, state.q.dtype), state.qd]))
        out.update(
            fixed=lagrangian_terms(model, state, base="fixed"),
            coriolis_fixed=coriolis_matrix(model, state, base="fixed"),
            c_still=sdjax.bias_forces(model, still),
            H_m_rate=_inertia_rate(model, state, fixed_base=True),
        )
    return out


_evaluate_batch = {
    with_fixed_base: jax.jit(
        jax.vmap(functools.partial(_evaluate, with_fixed_base=with_fixed_base), in_axes=(None, 0)),
        compiler_options=_FAST_COMPILE,
    )
    for with_fixed_base in (False, True)
}


def _run(model: sdjax.Model, count: int, with_fixed_base: bool) -> dict:
    states = _states(model, count)
    out = jax.tree.map(np.asarray, _evaluate_batch[with_fixed_base](model, states))
    return dict(model=model, states=states, count=count, out=out, nu=_velocities(states))


def _relative(diff: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Per-state ``max|diff| / max|ref|`` over all but the leading (state) axis (0 where both
    vanish, e.g. ``C~`` at rest)."""
    axes = tuple(range(1, diff.ndim))
    err, scale = np.max(np.abs(diff), axis=axes), np.max(np.abs(ref), axis=axes)
    return np.where(err == 0.0, 0.0, err / np.maximum(scale, np.finfo(np.float64).tiny))


def _check(name: str, case: dict, rtol: float = RTOL) -> dict:
    """Every identity of items 1-3 of the module docstring; returns the worst errors."""
    o, nu, model = case["out"], case["nu"], case["model"]
    terms, count, p = o["terms"], case["count"], LINEARITY_PROBES
    errors = {
        "H": _relative(terms.inertia - o["H"], o["H"]),
        "C": _relative(terms.bias - o["c"], o["c"]),
        "g": _relative(terms.gravity - o["c_rest"], o["c_rest"]),
        "C~ nu + g": _relative(np.einsum("bij,bj->bi", o["coriolis"], nu) + terms.gravity - o["c"], o["c"]),
    }
    factors = [("", o["H_rate"], o["coriolis"])]
    if "fixed" in o:
        fixed, h_m, c_m = o["fixed"], o["H"][:, 6:, 6:], o["c_still"][:, 6:]
        errors["H fixed"] = _relative(fixed.inertia - h_m, h_m)
        errors["C fixed"] = _relative(fixed.bias - c_m, c_m)
        errors["g fixed"] = _relative(fixed.gravity - o["c_rest"][:, 6:], o["c_rest"][:, 6:])
        errors["C~ qd + g fixed"] = _relative(
            np.einsum("bij,bj->bi", o["coriolis_fixed"], nu[:, 6:]) + fixed.gravity - c_m, c_m
        )
        factors.append((" fixed", o["H_m_rate"], o["coriolis_fixed"]))
    for suffix, rate, factor in factors:
        # Skew-symmetry of dH/dt - 2 C~: both terms are O(|H| |nu|); compare with their size.
        n_matrix = rate - 2.0 * factor
        errors["skew" + suffix] = _relative(
            n_matrix + np.swapaxes(n_matrix, 1, 2), np.maximum(np.abs(rate), 2.0 * np.abs(factor))
        )
        # Linearity in nu: C~(a + 2 b) = C~(a) + 2 C~(b) at the same positions.
        a, b, mixed = factor[:p], factor[count + 1 : count + 1 + p], factor[count + 1 + p :]
        errors["linear" + suffix] = _relative(mixed - (a + 2.0 * b), np.abs(a) + 2.0 * np.abs(b))
    # Energies: T = 1/2 nu^T H nu = sdjax.kinetic_energy (sums of positive terms). V can cancel
    # to ~0: compare with the size of its terms, sum_b m_b |g| |r_b|.
    errors["T"] = _relative(terms.kinetic_energy - o["T"], o["T"])
    errors["T = nu H nu / 2"] = _relative(0.5 * np.einsum("bi,bij,bj->b", nu, terms.inertia, nu) - o["T"], o["T"])
    masses = np.concatenate([[float(model.base_mass)], np.asarray(model.link_mass)])
    v_scale = np.linalg.norm(np.asarray(model.gravity)) * np.einsum(
        "k,bk->b", masses, np.linalg.norm(o["centroids"], axis=-1)
    )
    errors["V"] = _relative(terms.potential_energy - o["V"], v_scale)
    worst = {k: float(np.max(v)) for k, v in errors.items()}
    print(f"\n{name}: " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()))
    for label, value in worst.items():
        assert value < rtol, f"{name}: {label} relative error {value:.3e} >= {rtol:.0e}"
    # The Lagrangian H is a valid inertia matrix: symmetric (exactly, by construction) and SPD.
    assert np.array_equal(terms.inertia, np.swapaxes(terms.inertia, 1, 2))
    assert np.min(np.linalg.eigvalsh(terms.inertia)) > 0.0
    return worst


# ------------------------------------------------------------------------------------------
# 1-2. Seed 002 Table 1: the 14-joint three-arm tree, 100 random states.


@pytest.fixture(scope="module")
def three_arm():
    model = three_arm_tree(0)
    assert model.num_joints == 14 and "P" in model.joint_type and np.any(np.asarray(model.gravity) != 0.0)
    assert sum(p == 0 for p in model.parent) == 3  # three arms on the base
    return _run(model, 100, with_fixed_base=True)


def test_three_arm_tree_table1(three_arm):
    assert three_arm["count"] == 100
    _check("three_arm_tree", three_arm)


def test_raw_christoffel_matrix_needs_the_base_rotation_term(three_arm):
    """Without the ``-H T'`` term (module docstring of sdjax.lagrange) ``dH/dt - 2 C~`` is far
    from skew-symmetric: the term is what makes the property hold in sdjax's velocities."""
    o = three_arm["out"]
    w0 = three_arm["nu"][:, 3:6]
    half_spin = 0.5 * np.asarray(jax.vmap(sdjax.rotation.skew)(jnp.asarray(w0)))
    raw = o["coriolis"].copy()
    raw[:, :, 3:6] += np.einsum("bij,bjk->bik", o["H"][:, :, 3:6], half_spin)
    n_matrix = o["H_rate"] - 2.0 * raw
    asymmetry = _relative(n_matrix + np.swapaxes(n_matrix, 1, 2), np.abs(o["H_rate"]))
    assert np.max(asymmetry[:100]) > 1e-3


# ------------------------------------------------------------------------------------------
# 3. Random trees.


@pytest.fixture(scope="module")
def random_tree():
    model = random_model(*RANDOM_TREE, gravity=True)
    assert model.joint_type.count("P") >= 2 and len(set(model.parent)) < model.num_joints  # prismatic, branches
    return _run(model, STATES_PER_TREE, with_fixed_base=False)


def test_random_tree(random_tree):
    _check(random_tree["model"].name, random_tree)


# ------------------------------------------------------------------------------------------
# 4. jit vs vmap, float32, rest state.


def test_rest_state(three_arm, random_tree):
    # The state at rest, identity attitude, q = 0 was checked against the recursion with the
    # others; C~ vanishes there exactly.
    for case in (three_arm, random_tree):
        rest = case["count"]
        assert np.all(case["nu"][rest] == 0.0) and np.all(case["out"]["coriolis"][rest] == 0.0)


def test_public_call_and_gradients_at_rest():
    """The public (``eqx.filter_jit``) functions called directly, and gradients of H, g and the
    energies with respect to the model and the state at rest, identity attitude, q = 0 (where
    Rodrigues' formula is differentiated at zero)."""
    model = random_model(5, 2, gravity=True)
    state = sdjax.make_state(model)
    terms = lagrangian_terms(model, state)
    h = sdjax.inertia_matrix(model, state)
    c = sdjax.bias_forces(model, state)
    np.testing.assert_allclose(terms.inertia, h, rtol=0, atol=RTOL * np.abs(h).max())
    np.testing.assert_allclose(terms.bias, c, rtol=0, atol=RTOL * np.abs(c).max())

    def total(m, s):
        terms = lagrangian_terms(m, s)
        return jnp.sum(terms.inertia) + jnp.sum(terms.gravity) + terms.kinetic_energy + terms.potential_energy

    grads = jax.jit(jax.grad(total, argnums=(0, 1)), compiler_options=_FAST_COMPILE)(model, state)
    assert all(bool(jnp.all(jnp.isfinite(leaf))) for leaf in jax.tree.leaves(grads))


def test_float32(random_tree):
    case, count = random_tree, random_tree["count"]
    model32 = case["model"].astype(jnp.float32)
    states32 = jax.tree.map(lambda x: x[:count].astype(jnp.float32), case["states"])

    def run(state):
        return lagrangian_terms(model32, state), coriolis_matrix(model32, state)

    terms, coriolis = jax.jit(jax.vmap(run), compiler_options=_FAST_COMPILE)(states32)
    assert terms.inertia.dtype == terms.bias.dtype == coriolis.dtype == jnp.float32
    o, nu = case["out"], case["nu"][:count]
    h, c = o["H"][:count], o["c"][:count]
    rel_h = _relative(np.asarray(terms.inertia, np.float64) - h, h)
    rel_c = _relative(np.asarray(terms.bias, np.float64) - c, c)
    factored = np.einsum("bij,bj->bi", np.asarray(coriolis, np.float64), nu) + np.asarray(terms.gravity, np.float64)
    rel_f = _relative(factored - c, c)
    print(f"\nfloat32: H {rel_h.max():.1e}, C {rel_c.max():.1e}, C~ nu + g {rel_f.max():.1e}")
    # float32 eps = 1.2e-7; the float32 inputs themselves are rounded (relative 6e-8 in the
    # angles, giving ~1e-7 |dH/dq|), and C is a difference of second derivatives whose terms
    # exceed |C| by ~10x: observed ~1e-6. 1e-4 leaves two orders of margin and still rejects
    # any modelling error (>= 1e-3).
    assert max(rel_h.max(), rel_c.max(), rel_f.max()) < 1e-4


def test_base_override_equals_the_model_in_that_mode():
    """``base=`` computes the terms of the model in another base mode: equal to building the
    model in that mode (``edit_model``) and to the recursive ``H``/``c`` there; ``"fixed"`` holds
    the base of a moving state (its twist ignored). ``fixed_base=`` is the deprecated spelling."""
    model = random_model(5, 2, gravity=True)
    state = sdjax.make_state(model, q=jnp.array([0.3, 0.6]), qd=jnp.array([0.2, -0.4]))
    for mode in ("planar", "fixed"):
        moved = sdjax.edit_model(model, base=mode)
        terms = lagrangian_terms(model, state, base=mode)
        h, c = sdjax.inertia_matrix(moved, state), sdjax.bias_forces(moved, state)
        # Same tolerance as the module's oracle comparisons: autodiff and the recursion round off differently.
        np.testing.assert_allclose(terms.inertia, h, rtol=0, atol=RTOL * np.abs(h).max())
        np.testing.assert_allclose(terms.bias, c, rtol=0, atol=RTOL * np.abs(c).max())
    spinning = eqx.tree_at(lambda s: s.base_angular_velocity, state, jnp.array([0.1, 0.2, 0.3]))
    held = lagrangian_terms(model, spinning, base="fixed")  # the twist is ignored, not refused
    np.testing.assert_array_equal(held.inertia, lagrangian_terms(model, state, base="fixed").inertia)
    with pytest.raises(
        Exception, match="the planar base .* cannot move along v0_z, w0_x, w0_y"
    ):  # checked when it runs
        lagrangian_terms(model, spinning, base="planar")
    with pytest.warns(DeprecationWarning, match='spelled base="fixed"'):
        old = coriolis_matrix(model, state, fixed_base=True)
    np.testing.assert_array_equal(old, coriolis_matrix(model, state, base="fixed"))
    with pytest.raises(ValueError, match="unknown base mode 'clamped'"):
        lagrangian_terms(model, state, base="clamped")


def test_bad_state_shape_raises():
    model = random_model(3, 4, gravity=True)
    other = sdjax.make_state(random_model(3, 3))
    for call in (lagrangian_terms, coriolis_matrix, mass_parameter_dependence):
        with pytest.raises(ValueError, match=r"expected shape \(4,\)"):
            call(model, other)


# ------------------------------------------------------------------------------------------
# 5. Seed 002 section 5: mass properties and the elements of H.


def _two_arm_tree() -> sdjax.Model:
    """Arm 1: links 1-4 (joint 2 prismatic) on the base; arm 2: links 5-6 on the base."""
    return tree_with_topology(21, (0, 1, 2, 3, 0, 5), ("R", "P", "R", "R", "R", "R"), name="two_arm_tree")


@pytest.fixture(scope="module")
def dependence():
    model = _two_arm_tree()
    state = random_state(model, 7)
    kinds = ("fixed_base", "floating_base", "generalized")
    run = jax.jit(
        lambda m, s: tuple(mass_parameter_dependence(m, s, kind=kind) for kind in kinds), compiler_options=_FAST_COMPILE
    )
    return model, state, dict(zip(kinds, jax.tree.map(np.asarray, run(model, state))))


#: A body "reaches" an element when its 100 % mass change moves it by more than this fraction
#: of max|H|; structural zeros come out at exactly 0 (autodiff never touches them), the
#: smallest genuine dependence in this generic configuration is ~1e-6.
REACH = 1e-10


def _carried(model: sdjax.Model) -> np.ndarray:
    """``(n, n + 1)`` bool: joint ``j`` carries body ``b`` (link ``b`` is in its subtree)."""
    support = np.asarray(model.tree.support, dtype=bool)  # [link, joint]
    return np.concatenate([np.zeros((model.num_joints, 1), bool), support.T], axis=1)


def test_fixed_base_backward_propagation(dependence):
    """Eq 24a: ``H_jk`` of a fixed-base arm depends on the mass properties of the links carried
    by both joints (``max(j, k)..N`` along a chain) and of no other body."""
    model, _, deps = dependence
    dep = deps["fixed_base"]
    carried = _carried(model)
    expected = carried[:, None, :] & carried[None, :, :]
    reach = dep.sensitivity > REACH
    np.testing.assert_array_equal(reach, expected)
    assert np.all(dep.sensitivity[~expected] == 0.0)
    # Along arm 1 (links 1-4, a chain) this is seed 002's k = max(j, k) rule; link 1's mass
    # properties reach only H_11 ("the first link only appear[s] in H_11").
    for j in range(4):
        for k in range(4):
            assert [b for b in range(7) if reach[j, k, b]] == list(range(max(j, k) + 1, 5))
    assert np.argwhere(reach[:, :, 1]).tolist() == [[0, 0]]


def test_floating_base_pattern(dependence):
    """The full moving-base ``H``: its joint block is the fixed-base ``H_m`` (same dependence);
    a base row of joint column ``k`` depends on the links joint ``k`` carries; only the base
    block involves every body (with the structural zeros of ``H_b``)."""
    model, _, deps = dependence
    floating, fixed = deps["floating_base"], deps["fixed_base"]
    n = model.num_joints
    np.testing.assert_allclose(floating.matrix[6:, 6:], fixed.matrix, rtol=0, atol=RTOL * np.abs(fixed.matrix).max())
    reach = floating.sensitivity > REACH
    np.testing.assert_array_equal(reach[6:, 6:], fixed.sensitivity > REACH)
    carried = _carried(model)
    for row in range(6):
        np.testing.assert_array_equal(reach[row, 6:], carried)
    every, links = np.ones(n + 1, bool), np.arange(n + 1) > 0
    # H_b = [[M E, -skew(s)], [skew(s), J]]: M and J involve every body; the first moment s
    # about the base centroid every link but not the base; zeros stay zero.
    expected_base = np.zeros((6, 6, n + 1), bool)
    expected_base[3:, 3:] = every
    for a in range(3):
        expected_base[a, a] = every
        for b in range(3):
            if a != b:
                expected_base[a, 3 + b] = expected_base[3 + b, a] = links
    np.testing.assert_array_equal(reach[:6, :6], expected_base)


def test_generalized_inertia_depends_on_every_body(dependence):
    """Free-floating mode (seed 002 section 5): every element of ``H*`` depends on the mass
    properties of every body, the base included, even for joints on different arms."""
    model, state, deps = dependence
    dep = deps["generalized"]
    assert np.all(dep.sensitivity > REACH), f"smallest sensitivity {dep.sensitivity.min():.2e}"
    np.testing.assert_allclose(
        dep.matrix, sdjax.generalized_inertia_matrix(model, state), rtol=0, atol=RTOL * np.abs(dep.matrix).max()
    )


@pytest.mark.parametrize("kind", ["fixed_base", "floating_base", "generalized"])
def test_mass_derivatives_euler_identity(dependence, kind):
    """Every matrix is homogeneous of degree 1 in the mass properties (scaling all masses and
    inertias scales it): ``sum_b m_b dH/dm_b + <I_b, dH/dI_b> = H`` (Euler), which checks the
    derivatives' values, not only their zero pattern."""
    model, _, deps = dependence
    dep = deps[kind]
    masses = np.concatenate([[float(model.base_mass)], np.asarray(model.link_mass)])
    inertias = np.concatenate([np.asarray(model.base_inertia)[None], np.asarray(model.link_inertia)])
    rebuilt = np.einsum("jkb,b->jk", dep.mass_derivative, masses) + np.einsum(
        "jkbxy,bxy->jk", dep.inertia_derivative, inertias
    )
    # Sums of n + 1 products of O(|H|) terms (H* also involves H_b^-1): round-off.
    np.testing.assert_allclose(rebuilt, dep.matrix, rtol=0, atol=RTOL * np.abs(dep.matrix).max())


def test_mass_dependence_table(dependence):
    model, _, deps = dependence
    fixed = mass_dependence_table(model, deps["fixed_base"])
    lines = fixed.splitlines()
    assert lines[2] == "| | q1 | q2 | q3 | q4 | q5 | q6 |"
    assert lines[4] == "| q1 | 1-4 | 2-4 | 3-4 | 4 | - | - |"
    assert lines[8] == "| q5 |  |  |  |  | 5-6 | 6 |"
    floating = mass_dependence_table(model, deps["floating_base"]).splitlines()
    assert floating[4].startswith("| v0_x | all | - | - | - | 1-6 | 1-6 | 1-4 |")
    generalized = mass_dependence_table(model, deps["generalized"]).splitlines()
    assert generalized[4] == "| q1 | all | all | all | all | all | all |"
    print("\n" + fixed + "\n\n" + "\n".join(generalized))


def test_mass_dependence_errors(dependence):
    model, state, deps = dependence
    with pytest.raises(ValueError, match="mass_parameter_dependence: kind: unknown kind 'free'"):
        mass_parameter_dependence(model, state, kind="free")  # type: ignore[arg-type]
    batch = jax.tree.map(lambda x: np.stack([x, x]) if isinstance(x, np.ndarray) else x, deps["fixed_base"])
    assert isinstance(batch, MassDependence)
    with pytest.raises(ValueError, match="one state, not a batch"):
        mass_dependence_table(model, batch)
