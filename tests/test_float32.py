"""float32: dtypes follow the inputs, and results agree with float64 to single-precision
tolerances."""

import jax
import jax.numpy as jnp
import numpy as np

import sdjax
from sdjax.models import random_model, spacedyn_sample
from helpers import assert_close, random_state


def as32(tree):
    return jax.tree.map(lambda x: x.astype(jnp.float32), tree)


def test_float32_dtypes_and_accuracy():
    model = random_model(61, 8, gravity=True, passive=True)
    state = random_state(model, 0)
    m32, s32 = model.astype(jnp.float32), as32(state)
    tau = jnp.linspace(-1.0, 1.0, model.num_joints)
    h32, h64 = sdjax.inertia_matrix(m32, s32), sdjax.inertia_matrix(model, state)
    assert h32.dtype == jnp.float32
    # float32 eps ~ 1.2e-7; sums of O(n) products: ~1e-6 relative.
    assert_close(h32, h64, 1e-5, "H float32")
    base32, tau32 = sdjax.inverse_dynamics(m32, s32, jnp.ones(6, jnp.float32), jnp.ones(model.num_joints, jnp.float32))
    base64, tau64 = sdjax.inverse_dynamics(model, state, jnp.ones(6), jnp.ones(model.num_joints))
    assert tau32.dtype == jnp.float32
    assert_close(jnp.concatenate([base32, tau32]), jnp.concatenate([base64, tau64]), 1e-5, "RNE float32")
    acc32 = jnp.concatenate(sdjax.forward_dynamics(m32, s32, tau.astype(jnp.float32)))
    acc64 = jnp.concatenate(sdjax.forward_dynamics(model, state, tau))
    assert acc32.dtype == jnp.float32
    # The solve multiplies float32 round-off by cond(H) (~1e3 here).
    assert_close(acc32, acc64, 1e-3, "FD float32")


def test_float32_rollout_and_momentum():
    model = spacedyn_sample()
    state = random_state(model, 1, scale=0.3)
    traj32 = sdjax.rollout(model.astype(jnp.float32), as32(state), 0.01, 200, lambda t, s: -s.qd)
    traj64 = sdjax.rollout(model, state, 0.01, 200, lambda t, s: -s.qd)
    assert traj32.states.q.dtype == jnp.float32 and traj32.time.dtype == jnp.float32
    # 200 steps of float32 arithmetic: errors grow to ~1e-5 of O(1) joint angles.
    assert_close(traj32.states.q[-1], traj64.states.q[-1], 1e-4, "q after 2 s")
    end32 = jax.tree.map(lambda x: x[-1], traj32.states)
    p0 = sdjax.linear_momentum(model, state)
    p1 = sdjax.linear_momentum(model.astype(jnp.float32), end32)
    assert float(jnp.linalg.norm(p1 - p0.astype(jnp.float32))) < 1e-4 * float(jnp.linalg.norm(p0))


def test_float32_model_with_float64_inputs_is_computed_in_the_state_dtype():
    model = spacedyn_sample(dtype=jnp.float32)
    state = as32(random_state(model, 2))
    base_acc, qdd = sdjax.forward_dynamics(model, state, np.ones(6))  # NumPy float64 torques
    assert qdd.dtype == jnp.float32


def test_float32_model_with_a_float64_state_is_computed_in_float64():
    """Dtypes follow the inputs: a float64 state on a float32 model is computed in float64 (the
    kinematic pass added float64 slides into the model's float32 joint offsets in place, a
    FutureWarning of JAX's that later versions make an error; this suite raises warnings)."""
    model32 = spacedyn_sample(dtype=jnp.float32)
    model64 = model32.astype(jnp.float64)  # (the same float32-rounded numbers, in float64)
    state = random_state(model64, 3)
    with jax.numpy_dtype_promotion("standard"):  # (as users run: the suite's "strict" refuses mixing)
        mixed = sdjax.forward_dynamics(model32, state)
    for got, want in zip(mixed, sdjax.forward_dynamics(model64, state)):
        assert got.dtype == jnp.float64
        # Model-only terms (e.g. the fixed joint rotations from rpy) are formed in float32 before
        # they meet the state: float32 round-off (1.2e-7) on the accelerations at most; measured 5e-14.
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-9)


def test_float32_models_take_rotations():
    # A rotation rounded to float32 is ~6e-8 off R^T R = E, beyond the 1e-9 a float64 rotation
    # must meet; float32 models were refused every rotation by append_model and srms_system.
    from sdjax.editing import append_model
    from sdjax.models.srms import srms_system

    rotation = np.asarray(sdjax.rotation.rpy_to_matrix(jnp.array([0.3, 0.2, 0.1])))
    model = spacedyn_sample()
    joined32 = append_model(model.astype(jnp.float32), model.astype(jnp.float32), 1, rotation=rotation, prefix="b/")
    joined64 = append_model(model, model, 1, rotation=rotation, prefix="b/")
    state = random_state(joined64, 2)
    # float32 kinematics of 12 links: ~1e-6 relative (as the inertia matrix above)
    assert_close(sdjax.inertia_matrix(joined32, as32(state)), sdjax.inertia_matrix(joined64, state), 1e-5, "H")
    system32, system64 = srms_system(dtype=jnp.float32), srms_system()
    assert system32.payload_rotation.dtype == jnp.float32
    # one rounding of the float64 values: float32 eps
    assert_close(system32.payload_rotation, system64.payload_rotation, 1e-6, "payload rotation")
