"""Mimic joints (``Model.mimic_leader``): joints moved by another joint, no coordinate of their own.

References: the same mechanism as a tree with every joint a coordinate and the mimic relations as
exact constraints (:func:`sdjax.constraints.constrained_forward_dynamics` with
:class:`sdjax.constraints.JointCoupling`: Lagrange multipliers, an independent formulation),
conservation of energy and momentum, finite differences, and Pinocchio's mimic models
(tests/test_urdf.py).
"""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax import constraints as C
from sdjax.model import edit_model, joint_coordinate_map
from sdjax.models import random_model

#: Joint 3 follows joint 2 (geared, reversed, offset); joint 6 follows joint 4 (on another branch).
MIMIC = dict(
    mimic_leader=(0, 0, 2, 0, 0, 4),
    mimic_multiplier=[1.0, 1.0, -0.7, 1.0, 1.0, 2.0],
    mimic_offset=[0.0, 0.0, 0.1, 0.0, 0.0, -0.2],
)


def _models(base: str = "floating", passive: bool = False):
    plain = random_model(5, 6, chain_probability=0.5, passive=passive)
    plain = edit_model(plain, base=base, gravity=[0.0, 0.2, -9.81] if base != "floating" else [0.0, 0.0, 0.0])
    return plain, edit_model(plain, **MIMIC)


def _couplings(model):
    return [
        C.JointCoupling(k + 1, leader, float(model.mimic_multiplier[k]), float(model.mimic_offset[k]))
        for k, leader in enumerate(model.mimic_leader)
        if leader
    ]


def _state(model, seed: int):
    rng = np.random.default_rng(seed)
    nc = model.num_joint_coordinates
    base = {} if model.base == "fixed" else {"base_angular_velocity": [0.0, 0.0, 0.3]}
    return sdjax.make_state(model, q=rng.uniform(-1, 1, nc), qd=rng.normal(size=nc), **base)


@pytest.mark.parametrize("base", ["floating", "planar", "fixed"])
def test_mimic_dynamics_equal_the_exactly_constrained_tree(base):
    """Forward dynamics of the mimic model = the tree with every joint free and the relations as
    exact constraints (torques on mimic joints included); inverse dynamics gives them back on
    the leaders; the inertia matrix is ``G^T H G``."""
    plain, model = _models(base, passive=True)
    s = np.asarray(joint_coordinate_map(model))
    nb = model.num_base_velocities
    g = np.zeros((plain.num_velocities, model.num_velocities))
    g[:nb, :nb] = np.eye(nb)
    g[nb:, nb:] = s
    rng = np.random.default_rng(1)
    for seed in range(3):
        state = _state(model, seed)
        tau = rng.normal(size=model.num_joints)
        base_acc, qdd = sdjax.forward_dynamics(model, state, tau)
        exact = C.constrained_forward_dynamics(plain, state, tau, _couplings(model))
        # Reduced Cholesky against the KKT/Schur solve of the full tree: ~cond * eps.
        np.testing.assert_allclose(qdd, exact.qdd, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(base_acc, exact.base_acceleration, rtol=1e-10, atol=1e-10)
        h = np.asarray(sdjax.inertia_matrix(plain, state))
        # G^T H G: the same sums, reordered (round-off only).
        np.testing.assert_allclose(sdjax.inertia_matrix(model, state), g.T @ h @ g, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(
            sdjax.bias_forces(model, state), g.T @ np.asarray(sdjax.bias_forces(plain, state)), rtol=1e-13, atol=1e-12
        )
        _, tau_id = sdjax.inverse_dynamics(model, state, base_acc, qdd)
        # The same generalized force: S^T tau (passive torques excluded from both).
        np.testing.assert_allclose(s.T @ np.asarray(tau_id), s.T @ tau, rtol=1e-10, atol=1e-10)
        assert np.all(np.asarray(tau_id)[np.asarray(model.mimic_leader) > 0] == 0)
        np.testing.assert_allclose(
            sdjax.generalized_acceleration(model, state, sdjax.make_controls(model, tau)),
            np.concatenate(
                [np.asarray(base_acc)[list(model.base_coordinates)], np.asarray(qdd)[model.independent_joints]]
            ),
            rtol=1e-12,
            atol=1e-12,
        )


def test_mimic_rollout_conserves_energy_and_momentum_and_keeps_the_relations():
    """A free-floating mimic model coasting: energy and momentum conserved to the integrator's
    error, the mimic joints on their leaders to round-off; the batched rollout (the fallback
    of the compiled kernel) equals the single ones."""
    _, model = _models("floating")
    state = _state(model, 4)
    traj = sdjax.rollout(model, state, 1e-3, 400)
    q, qd = np.asarray(traj.states.q), np.asarray(traj.states.qd)
    for k, leader in enumerate(model.mimic_leader):
        if leader:
            m, c = float(model.mimic_multiplier[k]), float(model.mimic_offset[k])
            # Linear relations are invariants of every Runge-Kutta method: round-off only.
            np.testing.assert_allclose(q[:, k], m * q[:, leader - 1] + c, rtol=0, atol=1e-13)
            np.testing.assert_allclose(qd[:, k], m * qd[:, leader - 1], rtol=0, atol=1e-13)
    energy = jax.vmap(lambda s: sdjax.kinetic_energy(model, s))(traj.states)
    # RK4 at 1 ms over 0.4 s of a smooth coast: energy error ~1e-10 relative.
    assert float(jnp.max(jnp.abs(energy - energy[0])) / energy[0]) < 1e-8
    momentum = jax.vmap(lambda s: sdjax.system_momentum(model, s))(traj.states)
    # Momentum is exactly conserved by the equations; RK4 keeps it to round-off per step.
    np.testing.assert_allclose(momentum, np.broadcast_to(momentum[0], momentum.shape), rtol=0, atol=1e-10)
    # Eq 109's base twist for zero momentum, from every joint's rates (the mimic ones follow).
    still = sdjax.with_momentum(model, state)
    np.testing.assert_allclose(sdjax.system_momentum(model, still), np.zeros(6), rtol=0, atol=1e-12)
    batch = jax.tree.map(lambda x: jnp.stack([x] * 64), state)
    batched = jax.vmap(lambda s: sdjax.rollout(model, s, 1e-3, 20).states.q[-1])(batch)
    # The same arithmetic vectorised (XLA may reorder sums): round-off of 20 RK4 steps.
    np.testing.assert_allclose(batched, np.broadcast_to(q[20], batched.shape), rtol=0, atol=1e-12)


def test_mimic_passive_terms_implicit_and_stable_step():
    """Stiff damping on a mimic joint: the implicit step treats ``S^T D S`` implicitly and stays
    finite where explicit RK4 needs the step :func:`sdjax.max_stable_step` gives."""
    _, model = _models("fixed")
    model = edit_model(  # light links (grams, g cm^2) under URDF-like damping on the mimic joint
        model,
        joint_damping=jnp.zeros(6).at[2].set(500.0),
        link_mass=model.link_mass * 1e-3,
        link_inertia=model.link_inertia * 1e-3,
    )
    state = _state(model, 2)
    limit = sdjax.max_stable_step(model, state)
    assert 0 < limit < 1e-3  # a light link under heavy damping
    traj = sdjax.rollout(model, state, 1e-3, 200, integrator="implicit")
    assert np.all(np.isfinite(np.asarray(traj.states.q)))
    # The implicit step damps the mimic pair's motion (no energy gain) and keeps the relation.
    np.testing.assert_allclose(traj.states.q[:, 2], -0.7 * traj.states.q[:, 1] + 0.1, rtol=0, atol=1e-12)
    explicit = sdjax.rollout(model, state, 3 * limit, 100)
    assert not np.all(np.isfinite(np.asarray(explicit.states.q))) or float(jnp.max(jnp.abs(explicit.states.qd))) > 1e3


def test_gradient_with_respect_to_the_multiplier_matches_finite_differences():
    _, model = _models("fixed")
    state = _state(model, 3)
    tau = jnp.linspace(-1.0, 1.0, 6)

    def final_angle(multiplier):
        m = edit_model(model, mimic_multiplier=model.mimic_multiplier.at[2].set(multiplier))
        start = sdjax.make_state(m, q=state.q[m.independent_joints], qd=state.qd[m.independent_joints])
        return sdjax.rollout(m, start, 2e-3, 50, jnp.broadcast_to(tau, (50, 6))).states.q[-1, 2]

    h = 1e-6
    fd = (final_angle(-0.7 + h) - final_angle(-0.7 - h)) / (2 * h)
    # Central differences: O(h^2) truncation plus round-off / h ~ 1e-10 relative.
    np.testing.assert_allclose(jax.grad(final_angle)(-0.7), fd, rtol=1e-6)


def test_mimic_models_are_checked_and_refused_where_unsupported():
    plain, model = _models("floating")
    with pytest.raises(ValueError, match=r"mimic_leader\[5\].*mimics joint 3, which mimics joint 2 itself"):
        edit_model(model, mimic_leader=(0, 0, 2, 0, 0, 3))
    with pytest.raises(ValueError, match=r"mimic_leader\[0\].*expected another joint 1..6"):
        edit_model(model, mimic_leader=(1, 0, 2, 0, 0, 4))
    with pytest.raises(ValueError, match=r"independent \(mimic_leader 0\): expected 1 and 0"):
        edit_model(plain, mimic_multiplier=jnp.full(6, 2.0))
    with pytest.raises(ValueError, match=r"q\[2\] must be -0.7 \* q\[1\] \+ 0.1"):
        sdjax.make_state(model, q=np.zeros(6))
    state = _state(model, 0)
    with pytest.raises(
        Exception, match=r"inverse_dynamics: qdd of the mimic joints \['link3', 'link6'\] of model .* must follow"
    ):
        sdjax.inverse_dynamics(model, state, None, jnp.ones(6))
    with pytest.raises(ValueError, match="PlanningProblem: model .* has mimic joints .*mimic='constraints'"):
        sdjax.PlanningProblem(model, state, jnp.zeros(3), duration=1.0, num_steps=4, num_coefficients=3)
    with pytest.raises(ValueError, match="generalized_bias: model .* has mimic joints"):
        sdjax.generalized_bias(model, state)
    with pytest.raises(ValueError, match="computed_torque_terms: model .* has mimic joints"):
        sdjax.computed_torque_terms(model, state)
    with pytest.raises(ValueError, match="model_to_spacedyn_arrays: .* has mimic joints"):
        sdjax.model_to_spacedyn_arrays(model)
    with pytest.raises(ValueError, match="constrained_forward_dynamics: .* has mimic joints"):
        C.constrained_forward_dynamics(model, state, None, [])


def test_info_and_simulate_show_the_mimic_joints(capsys, tmp_path):
    """``sdjax info`` on Franka's Panda (tests/data/README.md) counts the mimic finger and names
    its leader; ``sdjax simulate`` runs it (the finger following its leader)."""
    from sdjax.cli import main

    panda = str(pathlib.Path(__file__).parent / "data" / "panda.urdf")
    assert main(["info", panda]) == 0
    out = capsys.readouterr().out
    assert "DOF 14 (6 base + 8 joints, 1 mimic; floating base)" in out
    assert "panda_rightfinger  prismatic, mimics 8 (1 x panda_leftfinger + 0)" in out
    with pytest.raises(ValueError, match="panda_finger_joint2.*couples it to another joint"):
        sdjax.load_model(panda, mimic="refuse")
    assert main(["info", panda, "--mimic", "refuse"]) != 0
    assert "couples it to another joint" in capsys.readouterr().err
    assert main(["simulate", panda, "--duration", "0.02", "--dt", "0.001", "--out", str(tmp_path / "run.npz")]) == 0
    run = sdjax.load_run(tmp_path / "run.npz")
    q = np.asarray(run.trajectory.states.q)
    np.testing.assert_allclose(q[:, 8], q[:, 7], rtol=0, atol=1e-14)  # multiplier 1, offset 0


def test_float32_relations_and_checks_at_run_time():
    """float32 models keep their relations to float32 round-off (checked to that dtype's
    tolerance), a State built around ``make_state`` that breaks them is refused when the rollout
    runs, and the multiplier and offset fields of independent joints get no gradient."""
    _, model = _models("floating")
    m32 = model.astype(jnp.float32)
    state = sdjax.make_state(m32, q=np.linspace(-0.5, 0.5, 4), qd=np.linspace(0.3, -0.2, 4))
    again = sdjax.make_state(m32, q=np.asarray(state.q), qd=np.asarray(state.qd))  # every joint, float32
    final = sdjax.rollout(m32, again, 1e-3, 50).states
    last = jax.tree.map(lambda x: x[-1], final)
    sdjax.make_state(m32, q=np.asarray(last.q), qd=np.asarray(last.qd))  # still on the relations
    broken = sdjax.State(*(getattr(_state(model, 0), f) for f in ("base_position", "base_quaternion")),
                         jnp.zeros(3), jnp.zeros(3), jnp.zeros(6), jnp.zeros(6))  # fmt: skip
    with pytest.raises(Exception, match=r"rollout: initial_state: q of the mimic joints \['link3', 'link6'\]"):
        sdjax.rollout(model, broken, 1e-3, 2)
    # Independent joints: their multiplier 1 and offset 0 are not parameters of the motion.
    state64 = _state(model, 1)

    def final_angle(multiplier, offset):
        m = edit_model(model, mimic_multiplier=multiplier, mimic_offset=offset, dtype=None)
        start = sdjax.make_state(m, q=state64.q[m.independent_joints], qd=state64.qd[m.independent_joints])
        return jnp.sum(sdjax.rollout(m, start, 2e-3, 10).states.q[-1])

    g_multiplier, g_offset = jax.grad(final_angle, argnums=(0, 1))(model.mimic_multiplier, model.mimic_offset)
    independent = model.independent_joints
    assert np.all(np.asarray(g_multiplier)[independent] == 0) and np.all(np.asarray(g_offset)[independent] == 0)
    assert np.all(np.asarray(g_multiplier)[[2, 5]] != 0) and np.all(np.asarray(g_offset)[[2, 5]] != 0)


def test_joint_controllers_and_locks_on_mimic_models(tmp_path, capsys):
    """Default PD gains act on the joint coordinates (none on mimic joints): the CLI's PD
    controller and the identification record run on Panda and on a random tree; locking a
    relation at positions that break it is refused; the modal analysis refuses mimic models."""
    from sdjax.cli import main

    panda = str(pathlib.Path(__file__).parent / "data" / "panda.urdf")
    target = ["0.1"] * 8 + ["0.02"]  # every joint, the finger pair consistent (multiplier 1)
    out = str(tmp_path / "pd.npz")
    assert main(["simulate", panda, "--base", "fixed", "--controller", "pd", "--target", *target,
                 "--duration", "0.05", "--dt", "0.001", "--out", out]) == 0  # fmt: skip
    q = np.asarray(sdjax.load_run(out).trajectory.states.q)
    np.testing.assert_allclose(q[:, 8], q[:, 7], rtol=0, atol=1e-14)  # the right finger follows
    _, model = _models("fixed")
    record = sdjax.identification.sinusoidal_excitation(model, _state(model, 0).q, 0.05, 0.005)
    assert record.states.q.shape[-1] == 6 and np.all(np.isfinite(np.asarray(record.torques)))
    with pytest.raises(ValueError, match=r"lock_joints: positions: joint 3 mimics joint 2, so it locks at"):
        sdjax.editing.lock_joints(model, [2, 3], [0.5, 0.0])
    with pytest.raises(ValueError, match="linear_modes: model .* has mimic joints"):
        sdjax.flexible.linear_modes(model, [1, 2])
    capsys.readouterr()
