"""The route a batched forward dynamics takes on an accelerator, run on the CPU.

On a GPU the batch is one vectorised program (no chunks, no compiled CPU kernel) and, from
:data:`sdjax.dynamics.UNROLLED_CHOLESKY_MIN_BATCH` samples, inertia matrices of up to
:data:`sdjax.dynamics.UNROLLED_CHOLESKY_MAX_SIZE` free coordinates are factorised by unrolled
array arithmetic instead of cuSOLVER. These tests make the CPU answer
``jax.default_backend()`` with ``"gpu"`` while the program is traced, so the same program runs
here, and check it against the CPU's own route (LAPACK per sample) on random trees with branches
and prismatic joints, in every base mode, in values and in first derivatives, float64 and
float32.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax import dynamics
from sdjax.models import random_model
from helpers import assert_close, random_state

# Tolerances (relative to max(1, the largest value)): the same factorisation in another order of
# operations, then derivatives through it. float64: round-off of a solve with up to 11 unknowns
# and condition numbers up to ~1e4 (observed <= 1e-13); float32: epsilon 1.2e-7 times that
# condition number, with headroom (observed <= 7e-5; as tests/test_batch_kernel.py).
RTOL = {jnp.float64: 1e-10, jnp.float32: 3e-3}
BATCH = 5


@pytest.fixture
def accelerator(monkeypatch):
    """Traces made while this fixture is active take the accelerator's route (caches dropped
    on both sides so no trace crosses over)."""
    jax.clear_caches()
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(dynamics, "UNROLLED_CHOLESKY_MIN_BATCH", BATCH)  # (small batches here)
    yield
    monkeypatch.undo()
    jax.clear_caches()


def _primitives(jaxpr) -> set[str]:
    """Names of every primitive in a program, sub-programs included."""
    names = {eqn.primitive.name for eqn in jaxpr.eqns}
    for eqn in jaxpr.eqns:
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            names |= _primitives(sub)
    return names


def _problem(base: str, num_links: int, dtype):
    model = random_model(7, num_links, gravity=True, passive=True, prismatic_probability=0.4)
    model = sdjax.edit_model(model, base=base).astype(dtype)
    rng = np.random.default_rng(3)
    states = jax.tree.map(lambda *xs: jnp.stack(xs).astype(dtype), *[random_state(model, k) for k in range(BATCH)])
    # The base moves only along the components its mode leaves free.
    free = np.isin(np.arange(6), model.base_coordinates).astype(np.dtype(dtype))
    states = eqx.tree_at(
        lambda s: (s.base_linear_velocity, s.base_angular_velocity),
        states,
        (states.base_linear_velocity * free[:3], states.base_angular_velocity * free[3:]),
    )
    n, ne = model.num_joints, model.num_end_points
    controls = dynamics.Controls(
        *(jnp.asarray(rng.normal(size=(BATCH, *shape)), dtype) for shape in [(n,), (3,), (3,), (ne, 3), (ne, 3)])
    )
    return model, states, controls


def _loss(model, state, controls):
    return jnp.sum(jnp.sin(dynamics.floating_acceleration(model, state, controls)))


def _results(model, states, controls):
    """Batched accelerations, their per-sample gradients (reverse mode) with respect to the
    model, state and controls, and a forward-mode derivative along the joint rates, in one
    compiled program; and the names of the primitives in it."""

    def along_joint_rates(state, control):
        tangent = eqx.tree_at(lambda s: s.qd, jax.tree.map(jnp.zeros_like, state), jnp.ones_like(state.qd))
        return jax.jvp(lambda s: dynamics.floating_acceleration(model, s, control), (state,), (tangent,))[1]

    def everything(model, states, controls):
        return (
            jax.vmap(dynamics.floating_acceleration, in_axes=(None, 0, 0))(model, states, controls),
            jax.vmap(jax.grad(_loss, argnums=(0, 1, 2)), in_axes=(None, 0, 0))(model, states, controls),
            jax.vmap(along_joint_rates)(states, controls),
        )

    traced = jax.jit(everything).trace(model, states, controls)
    return traced.lower().compile()(model, states, controls), _primitives(traced.jaxpr.jaxpr)


@pytest.mark.parametrize(
    "base, dtype",
    [("floating", jnp.float64), ("floating", jnp.float32), ("planar", jnp.float64), ("fixed", jnp.float32)],
)
def test_unrolled_cholesky_route_equals_the_cpu_route(base, dtype, accelerator, monkeypatch):
    model, states, controls = _problem(base, 5, dtype)
    assert "P" in model.joint_type and len(set(model.parent)) < model.num_joints  # prismatic, branched
    assert model.num_velocities <= dynamics.UNROLLED_CHOLESKY_MAX_SIZE
    ours, primitives = _results(model, states, controls)
    # No library factorisation left in the program (values, reverse and forward mode; the
    # derivative rule's solves with the factor stay the library's triangular solves).
    assert "cholesky" not in primitives
    monkeypatch.undo()  # the CPU's own route (LAPACK per sample; batches below the kernel's size)
    jax.clear_caches()
    reference, primitives = _results(model, states, controls)
    assert "cholesky" in primitives
    for what, a, b in zip(("accelerations", "gradients", "tangents"), ours, reference):
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
            assert_close(x, y, RTOL[dtype], f"{what} ({base}, {jnp.dtype(dtype).name})")


def test_large_matrices_small_batches_and_single_samples_keep_the_library_factorisation(accelerator):
    """Above the size bound (compile time grows as the cube of the size), below the batch
    bound, and for one sample, the accelerator calls the library."""
    batched = jax.vmap(dynamics.floating_acceleration, in_axes=(None, 0, 0))
    model, states, controls = _problem("floating", dynamics.UNROLLED_CHOLESKY_MAX_SIZE - 5, jnp.float64)
    assert model.num_velocities > dynamics.UNROLLED_CHOLESKY_MAX_SIZE
    assert "cholesky" in _primitives(jax.make_jaxpr(batched)(model, states, controls).jaxpr)
    model, states, controls = _problem("floating", 4, jnp.float64)
    small = jax.tree.map(lambda x: x[: BATCH - 1], (states, controls))
    assert "cholesky" in _primitives(jax.make_jaxpr(batched)(model, *small).jaxpr)
    one = jax.tree.map(lambda x: x[0], (states, controls))
    assert "cholesky" in _primitives(jax.make_jaxpr(dynamics.floating_acceleration)(model, *one).jaxpr)
    assert "cholesky" not in _primitives(jax.make_jaxpr(batched)(model, states, controls).jaxpr)
