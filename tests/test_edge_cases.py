"""Edge cases: a base alone, one link, prismatic-only chains, a 100-link chain and a large
branched tree (the ``lax.scan`` path of the subtree sums), checked against the NumPy oracle."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax.models import random_model
from sdjax.algebra import matmul3
from sdjax.tree import DENSE_MAX_LINKS
from helpers import assert_close, random_state
from spacedyn_oracle import SpaceDynOracle


def base_alone():
    return sdjax.Model(
        (),
        "",
        base_mass=20.0,
        base_inertia=np.diag([2.0, 3.0, 4.0]),
        link_mass=np.zeros(0),
        link_inertia=np.zeros((0, 3, 3)),
        parent_centroid_to_joint=np.zeros((0, 3)),
        centroid_to_joint=np.zeros((0, 3)),
    )


def check_against_oracle(model, seed=0, rtol=1e-11):
    """Kinematics, H, RNE and forward dynamics against the oracle at one random state."""
    oracle = SpaceDynOracle(sdjax.model_to_spacedyn_arrays(model), gravity=np.asarray(model.gravity))
    state = random_state(model, seed)
    R0, A0, q = np.asarray(state.base_position), np.asarray(state.base_rotation), np.asarray(state.q)
    v0, w0, qd = np.asarray(state.base_linear_velocity), np.asarray(state.base_angular_velocity), np.asarray(state.qd)
    AA = oracle.rotations(A0, q)
    RR, PP = oracle.positions(R0, A0, AA, q)
    kin = sdjax.forward_kinematics(model, state)
    assert_close(kin.centroid, np.vstack([R0] + RR), rtol, "centroids")
    assert_close(sdjax.inertia_matrix(model, state), oracle.inertia_matrix(R0, A0, AA, RR, PP), rtol, "H")
    rng = np.random.default_rng(seed)
    acc = rng.normal(size=model.num_velocities)
    expected = oracle.newton_euler(R0, A0, AA, RR, q, v0, w0, acc[:3], acc[3:6], qd, acc[6:])
    base, tau = sdjax.inverse_dynamics(model, state, acc[:6], acc[6:])
    assert_close(jnp.concatenate([base, tau]), expected, rtol, "RNE")
    tau_in = rng.normal(size=model.num_joints)
    expected = oracle.forward_dynamics(R0, A0, q, v0, w0, qd, np.zeros(3), np.zeros(3), tau_in)
    base_acc, qdd = sdjax.forward_dynamics(model, state, tau_in)
    return jnp.concatenate([base_acc, qdd]), expected


def test_base_alone_is_a_rigid_body():
    model = base_alone()
    state = random_state(model, 0)
    fd, expected = check_against_oracle(model)
    assert_close(fd, expected, 1e-12, "FD")  # 6x6 solve, well conditioned
    # Euler's equations: I w' + w x I w = 0 in the inertial frame.
    world = state.base_rotation @ model.base_inertia @ state.base_rotation.T
    w = state.base_angular_velocity
    assert_close(fd[3:], -jnp.linalg.solve(world, jnp.cross(w, world @ w)), 1e-12, "Euler equations")
    assert_close(fd[:3], jnp.zeros(3), 1e-15, "no force, no acceleration")
    traj = sdjax.rollout(model, state, 0.01, 5)
    assert traj.states.q.shape == (6, 0)
    assert sdjax.link_jacobians(model, state).shape == (1, 6, 6)
    assert sdjax.end_point_jacobians(model, state).shape == (0, 6, 6)


@pytest.mark.parametrize("joint_type", ["R", "P"])
def test_one_link(joint_type):
    model = sdjax.Model(
        (0,),
        joint_type,
        base_mass=30.0,
        base_inertia=np.diag([3.0, 3.5, 4.0]),
        link_mass=[2.0],
        link_inertia=[np.diag([0.2, 0.2, 0.05])],
        parent_centroid_to_joint=[[0.5, 0.1, 0.2]],
        centroid_to_joint=[[0.0, 0.0, -0.4]],
        joint_rpy=[[0.3, -0.2, 0.1]],
        end_point_link=(1,),
        centroid_to_end_point=[[0.0, 0.0, 0.4]],
        gravity=[0.0, 0.0, -9.8],
    )
    fd, expected = check_against_oracle(model)
    assert_close(fd, expected, 1e-11, "FD")  # cond(H) ~ 1e3


def test_prismatic_chain():
    model = random_model(51, 6, chain_probability=1.0, prismatic_probability=1.0, gravity=True)
    fd, expected = check_against_oracle(model)
    assert_close(fd, expected, 1e-9, "FD")  # cond(H) up to ~1e5


def test_hundred_link_chain():
    """Deep chain: seven pointer-jumping steps, subtree sums by lax.scan over 100 levels."""
    model = random_model(52, 100, chain_probability=1.0, prismatic_probability=0.1)
    assert model.num_joints > DENSE_MAX_LINKS
    fd, expected = check_against_oracle(model, rtol=1e-10)  # O(n) longer sums than the 30-link trees
    # A 100-link chain's H is badly conditioned; compare relative to cond(H) * eps.
    h = np.asarray(sdjax.inertia_matrix(model, random_state(model, 0)))
    tol = max(1e-9, 1e-15 * np.linalg.cond(h))
    assert_close(fd, expected, tol, "FD")
    traj = sdjax.rollout(model, random_state(model, 1, scale=0.01), 0.001, 3)
    assert bool(jnp.all(jnp.isfinite(traj.states.q)))


def test_wide_branched_tree_uses_scan_path():
    model = random_model(53, 60, chain_probability=0.3, gravity=True)
    assert model.num_joints > DENSE_MAX_LINKS
    fd, expected = check_against_oracle(model)
    h = np.asarray(sdjax.inertia_matrix(model, random_state(model, 0)))
    assert_close(fd, expected, max(1e-9, 1e-15 * np.linalg.cond(h)), "FD")


def test_dense_and_scan_subtree_sums_agree():
    """Both implementations of accumulate_up (dense support matrix for small trees, a level
    scan for large ones) give the same sums, equal to an explicit loop over subtrees; the
    pointer-jumping path sums and products equal explicit ones too."""
    from sdjax import tree as tree_mod

    model = random_model(54, 40, chain_probability=0.5)
    rng = np.random.default_rng(0)
    values = jnp.asarray(rng.normal(size=(41, 6)))
    dense = tree_mod.accumulate_up(model.tree, values)
    limit = tree_mod.DENSE_MAX_LINKS
    try:
        tree_mod.DENSE_MAX_LINKS = 0
        scanned = jax.jit(lambda v: tree_mod.accumulate_up(model.tree, v))(values)
    finally:
        tree_mod.DENSE_MAX_LINKS = limit
    assert_close(scanned, dense, 1e-14, "subtree sums")  # sums of ~40 O(1) terms in another order
    support = model.tree.support
    explicit = np.vstack([values.sum(0), support.T @ np.asarray(values[1:])])
    assert_close(dense, explicit, 1e-14, "explicit subtree sums")
    down = tree_mod.propagate_down(model.tree, jnp.add, values[0], values[1:], jnp.zeros(6))
    assert_close(down[1:], np.asarray(values[0]) + support @ np.asarray(values[1:]), 1e-14, "path sums")
    mats = jnp.asarray(rng.normal(size=(40, 3, 3)))
    products = tree_mod.propagate_down(model.tree, matmul3, jnp.eye(3), mats, jnp.eye(3))
    for link in (1, 17, 40):  # explicit products along the path, base side first
        expected = np.eye(3)
        for j in model.path_to_link(link):
            expected = expected @ np.asarray(mats[j - 1])
        assert_close(products[link], expected, 1e-12, f"path product to link {link}")
