"""JAX transformations: jit == eager, vmap == loop (over states and over models), gradients
against finite differences (forward and reverse), no NaN at zero velocity/rotation/angles."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import sdjax
from sdjax.models import random_model, spacedyn_sample
from helpers import assert_close, random_state


@pytest.fixture(scope="module")
def model():
    return random_model(41, 6, gravity=True, passive=True)


def _fd(model, state, tau):
    base_acc, qdd = sdjax.forward_dynamics(model, state, tau)
    return jnp.concatenate([base_acc, qdd])


def test_jit_equals_eager(model):
    state = random_state(model, 0)
    tau = jnp.linspace(-1.0, 1.0, model.num_joints)
    jitted = _fd(model, state, tau)
    with jax.disable_jit():
        eager = _fd(model, state, tau)
        eager_h = sdjax.inertia_matrix(model, state)
    # Same operations, different fusion: last-digit differences only.
    assert_close(jitted, eager, 1e-12, "forward dynamics jit vs eager")
    assert_close(sdjax.inertia_matrix(model, state), eager_h, 1e-13, "H jit vs eager")


def test_vmap_over_states_equals_loop(model):
    states = [random_state(model, seed) for seed in range(5)]
    batch = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
    tau = jnp.ones(model.num_joints)
    batched = jax.vmap(lambda s: _fd(model, s, tau))(batch)
    for k, s in enumerate(states):
        assert_close(batched[k], _fd(model, s, tau), 1e-12, f"vmap sample {k}")  # fusion differences only
    h = jax.vmap(lambda s: sdjax.inertia_matrix(model, s))(batch)
    assert h.shape == (5, model.num_velocities, model.num_velocities)


def test_vmap_over_models_equals_loop(model):
    rng = np.random.default_rng(1)
    models = [
        eqx.tree_at(lambda m: (m.link_mass, m.base_mass), model, (model.link_mass * s, model.base_mass * s))
        for s in rng.uniform(0.5, 2.0, 4)
    ]
    stacked = sdjax.stack_models(models)
    state = random_state(model, 1)
    tau = jnp.ones(model.num_joints)
    batched = jax.vmap(lambda m: _fd(m, state, tau))(stacked)
    for k, m in enumerate(models):
        assert_close(batched[k], _fd(m, state, tau), 1e-12, f"vmap model {k}")
    # Over models and states at once.
    states = jax.tree.map(lambda *xs: jnp.stack(xs), *[random_state(model, s) for s in range(4)])
    both = jax.vmap(lambda m, s: _fd(m, s, tau))(stacked, states)
    assert_close(both[2], _fd(models[2], jax.tree.map(lambda x: x[2], states), tau), 1e-12, "vmap models and states")


def test_gradients_against_finite_differences(model):
    """check_grads: first-order forward- and reverse-mode vs central differences."""
    state = random_state(model, 2)
    tau = jnp.linspace(-0.5, 0.5, model.num_joints)

    def fd_of_params(link_mass, link_inertia, offsets, q, qd, tau):
        m = eqx.tree_at(
            lambda m: (m.link_mass, m.link_inertia, m.parent_centroid_to_joint),
            model,
            (link_mass, link_inertia, offsets),
        )
        s = eqx.tree_at(lambda s: (s.q, s.qd), state, (q, qd))
        return _fd(m, s, tau)

    args = (model.link_mass, model.link_inertia, model.parent_centroid_to_joint, state.q, state.qd, tau)
    # Central differences with eps 1e-6 in float64: truncation ~1e-12 x third derivative,
    # round-off ~1e-16/1e-6; check_grads' default float64 tolerance (1e-5) covers both.
    check_grads(fd_of_params, args, order=1, modes=("fwd", "rev"), eps=1e-6)

    def rne_of_state(quat, q, qd, qdd):
        s = sdjax.State(state.base_position, quat, state.base_linear_velocity, state.base_angular_velocity, q, qd)
        return jnp.concatenate(sdjax.inverse_dynamics(model, s, jnp.ones(6), qdd))

    check_grads(
        rne_of_state,
        (state.base_quaternion, state.q, state.qd, jnp.ones(model.num_joints)),
        order=1,
        modes=("fwd", "rev"),
        eps=1e-6,
    )


def _fd_of_loads(model, state):
    def fd_of_loads(quat, q, base_force, end_force, end_torque):
        s = eqx.tree_at(lambda s: (s.base_quaternion, s.q), state, (quat, q))
        base_acc, qdd = sdjax.forward_dynamics(
            model,
            s,
            jnp.ones(model.num_joints),
            base_force=base_force,
            end_point_force=end_force,
            end_point_torque=end_torque,
        )
        return jnp.concatenate([base_acc, qdd])

    ne = model.num_end_points
    return jax.jit(fd_of_loads), (
        state.base_quaternion,
        state.q,
        jnp.array([1.0, -2.0, 0.5]),
        jnp.ones((ne, 3)),
        -jnp.ones((ne, 3)),
    )


def test_forward_dynamics_derivatives_of_applied_loads(model):
    """The implicit-function derivative rule of forward dynamics (sdjax.dynamics) for the
    tangents of the applied loads (base force, end-point loads) and the base attitude."""
    fn, args = _fd_of_loads(model, random_state(model, 3))
    # As above: eps 1e-6 central differences against check_grads' float64 tolerance.
    check_grads(fn, args, order=1, modes=("fwd", "rev"), eps=1e-6)


@pytest.mark.slow
def test_forward_dynamics_second_derivatives(model):
    """The derivative rule is itself differentiable: second derivatives (forward over
    reverse and forward over forward) against central differences of the first. Slow: each
    nested derivative is a new compiled program."""
    fn, args = _fd_of_loads(model, random_state(model, 3))
    check_grads(fn, args, order=2, modes=("fwd", "rev"), eps=1e-6)


def test_gradient_of_whole_model(model):
    """jax.grad reaches every array leaf of the Model; directional derivative matches FD."""
    state = random_state(model, 3)

    def loss(m):
        base_acc, qdd = sdjax.forward_dynamics(m, state, jnp.ones(m.num_joints))
        return jnp.sum(qdd**2) + jnp.sum(base_acc**2) + sdjax.kinetic_energy(m, state)

    grads = jax.grad(loss)(model)
    direction = jax.tree.map(lambda x: jnp.asarray(np.random.default_rng(3).normal(size=x.shape)), model)
    # The inertia tensors must stay symmetric along the direction.
    direction = eqx.tree_at(
        lambda m: (m.link_inertia, m.base_inertia),
        direction,
        (
            0.5 * (direction.link_inertia + jnp.swapaxes(direction.link_inertia, 1, 2)) * 1e-3,
            0.5 * (direction.base_inertia + direction.base_inertia.T) * 1e-3,
        ),
    )
    analytic = sum(jnp.sum(g * d) for g, d in zip(jax.tree.leaves(grads), jax.tree.leaves(direction)))
    eps = 1e-6
    plus = loss(jax.tree.map(lambda x, d: x + eps * d, model, direction))
    minus = loss(jax.tree.map(lambda x, d: x - eps * d, model, direction))
    # Central difference: O(eps^2) truncation, O(1e-16 |loss| / eps) round-off.
    assert_close(analytic, (plus - minus) / (2 * eps), 1e-6, "directional derivative")
    for name in (
        "link_mass",
        "link_inertia",
        "parent_centroid_to_joint",
        "centroid_to_joint",
        "joint_rpy",
        "gravity",
        "joint_stiffness",
        "joint_damping",
        "base_mass",
        "base_inertia",
    ):
        assert bool(jnp.any(getattr(grads, name) != 0)), name


def test_no_nan_gradients_at_zero():
    """Zero velocity, identity attitude, q = 0: every gradient is finite (guarded norms)."""
    model = spacedyn_sample()
    state = sdjax.make_state(model)

    def loss(quat, q, qd, w0, masses):
        m = eqx.tree_at(lambda m: m.link_mass, model, masses)
        s = sdjax.State(state.base_position, quat, state.base_linear_velocity, w0, q, qd)
        traj = sdjax.rollout(m, s, 0.01, 3, lambda t, x: -x.qd, integrator="euler")
        end = jax.tree.map(lambda x: x[-1], traj.states)
        return (
            jnp.sum(end.base_quaternion)
            + jnp.sum(sdjax.forward_dynamics(m, s)[1])
            + sdjax.kinetic_energy(m, s)
            + jnp.sum(sdjax.angular_momentum(m, s, about="com"))
        )

    grads = jax.grad(loss, argnums=(0, 1, 2, 3, 4))(
        state.base_quaternion, state.q, state.qd, state.base_angular_velocity, model.link_mass
    )
    for g in grads:
        assert bool(jnp.all(jnp.isfinite(g)))

    rot = jax.jacobian(lambda r: sdjax.make_state(model, base_rotation=r).base_quaternion)(jnp.eye(3))
    assert bool(jnp.all(jnp.isfinite(rot)))
    rod = jax.jacobian(lambda w: sdjax.rotation.rotation_vector_to_matrix(w))(jnp.zeros(3))
    assert bool(jnp.all(jnp.isfinite(rod)))
    quat = jax.jacobian(lambda w: sdjax.rotation.rotation_vector_to_quat(w))(jnp.zeros(3))
    assert bool(jnp.all(jnp.isfinite(quat)))


@pytest.mark.parametrize("dtype, rtol", [(jnp.float64, 1e-11), (jnp.float32, 3e-3)])
def test_chunked_batches_equal_per_sample(monkeypatch, dtype, rtol):
    """Under vmap, forward dynamics runs in chunks (lax.map) when the batch exceeds a chunk:
    values and first derivatives (with respect to the model, the state and the torques) must
    equal the per-sample path, on a tree with branches and prismatic joints, at the chunk
    boundaries and in the remainder chunk, with an unbatched model. Tolerances: float64, round-off
    of a 20-DOF solve in another fusion order (~1e-13, with headroom); float32, epsilon 1.2e-7
    times the condition number of the random tree's inertia matrix (up to ~1e4)."""
    from sdjax import batch_kernel, dynamics

    # The XLA path (the compiled kernel of sdjax.batch_kernel has tests of its own); traces
    # made with the other path must not be reused.
    monkeypatch.setenv(batch_kernel.KERNEL_ENV, "jax")
    jax.clear_caches()
    monkeypatch.setattr(dynamics, "CHUNK_BUDGET", 32 * 20**2)
    model = random_model(5, 14, gravity=True, passive=True).astype(dtype)
    assert dynamics.batch_chunk_size(model.num_velocities) == 32
    batch = 75  # two chunks of 32 and a remainder of 11
    states = jax.tree.map(
        lambda *xs: jnp.stack(xs).astype(dtype), *[random_state(model, 500 + k) for k in range(batch)]
    )
    taus = jnp.asarray(np.random.default_rng(5).normal(size=(batch, model.num_joints)), dtype)
    loss = lambda m, s, t: jnp.sum(jnp.sin(_fd(m, s, t)))
    values = jax.jit(jax.vmap(_fd, in_axes=(None, 0, 0)))(model, states, taus)
    grads = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1, 2)), in_axes=(None, 0, 0)))(model, states, taus)
    per_sample_value = jax.jit(_fd)
    per_sample_grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
    for k in (0, 31, 32, 63, 64, 74):
        state_k = jax.tree.map(lambda x: x[k], states)
        assert_close(values[k], per_sample_value(model, state_k, taus[k]), rtol, f"chunked value, sample {k}")
        expected = per_sample_grad(model, state_k, taus[k])
        for name, ours, ref in zip(("model", "state", "tau"), jax.tree.map(lambda x: x[k], grads), expected):
            for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(ref)):
                assert_close(a, b, rtol, f"chunked gradient wrt {name}, sample {k}")
    # Reverse mode through the whole chunked batch: the shared model's gradient is the sum of
    # the per-sample ones.
    model_grad = jax.jit(jax.grad(lambda m: jnp.sum(jax.vmap(loss, in_axes=(None, 0, 0))(m, states, taus))))(model)
    for a, b in zip(jax.tree.leaves(model_grad), jax.tree.leaves(jax.tree.map(lambda x: jnp.sum(x, axis=0), grads[0]))):
        assert_close(a, b, rtol, "gradient of a chunked batch wrt the shared model")


def test_batched_route_takes_its_batch_evaluation_and_the_plain_derivatives():
    """``sdjax._derivatives.batched_route(fun, evaluate_batch)``: under ``vmap`` the batch
    evaluation runs, told which leaves are batched and which shared; its values are the ones
    returned (here deliberately off by 1 on a leaf, to see which path ran); derivatives of
    every order are the plain function's, and the routed function keeps ``fun``'s name."""
    from sdjax._derivatives import batched_route

    def fun(x, pair):
        return {"s": jnp.sin(x) * pair[0], "c": jnp.cos(pair[1]) + x}

    calls = []

    def evaluate_batch(axis_size, args, in_batched, mapped, rebuild):
        calls.append((axis_size, jax.tree.leaves(in_batched)))
        out = jax.vmap(lambda m: fun(*rebuild(m)), axis_size=axis_size)(mapped)
        return {"s": out["s"], "c": out["c"] + 1.0}

    routed = batched_route(fun, evaluate_batch)
    assert routed.__name__ == "fun"
    x, pair = jnp.linspace(0.1, 1.0, 5), (jnp.asarray(2.0), jnp.asarray(0.3))
    out = jax.vmap(routed, in_axes=(0, None))(x, pair)
    assert calls == [(5, [True, False, False])]
    # (the same operations on the same values: round-off at most, hence 1e-15 relative)
    assert_close(out["s"], 2.0 * jnp.sin(x), 1e-15, "batched values")
    assert_close(out["c"], jnp.cos(0.3) + x + 1.0, 1e-15, "the batch evaluation's own values")
    assert_close(routed(x[1], pair)["c"], jnp.cos(0.3) + x[1], 1e-15, "one sample: the plain function")

    def total(x, pair):
        return jnp.sum(routed(x, pair)["s"]) + jnp.sum(routed(x, pair)["c"])

    # d/dx [2 sin x + cos b + x] = 2 cos x + 1; d/da = sin x; d/db = -sin b; second derivative
    # in x: -2 sin x (closed forms; round-off only, hence 1e-15 relative)
    assert_close(jax.vmap(jax.grad(total), in_axes=(0, None))(x, pair), 2.0 * jnp.cos(x) + 1.0, 1e-15, "vmap(grad)")
    grad_pair = jax.grad(lambda p: jnp.sum(jax.vmap(total, in_axes=(0, None))(x, p)))(pair)
    assert_close(grad_pair[0], jnp.sum(jnp.sin(x)), 1e-15, "grad(vmap) in a shared argument")
    assert_close(grad_pair[1], -5.0 * jnp.sin(0.3), 1e-15, "grad(vmap) in a shared argument")
    second = jax.vmap(jax.grad(jax.grad(total)), in_axes=(0, None))(x, pair)
    assert_close(second, -2.0 * jnp.sin(x), 1e-15, "second derivative")
    jac = jax.jacfwd(lambda x: jax.vmap(routed, in_axes=(0, None))(x, pair)["s"])(x)
    assert_close(jac, jnp.diag(2.0 * jnp.cos(x)), 1e-15, "jacfwd of the batch")


def test_batched_route_reverse_mode_takes_its_vjp_evaluation():
    """``batched_route(fun, evaluate_batch, evaluate_vjp)``: reverse mode of a batch runs the
    VJP evaluator (the transpose of the rule's linear primitive, ``_derivatives._linearized_p``),
    told which arguments are batched, and its cotangents are the ones used (here scaled by 2 on
    one leaf, to see which path ran); where it declines (None), the plain function's VJP runs.
    Forward mode, second derivatives (forward over reverse, reverse over reverse) and nested
    ``vmap`` under ``jit`` are the plain function's (closed forms)."""
    from sdjax._derivatives import batched_route

    def fun(x, pair):
        return {"s": jnp.sin(x) * pair[0], "c": jnp.cos(pair[1]) + x}

    def evaluate_batch(axis_size, args, in_batched, mapped, rebuild):
        return jax.vmap(lambda m: fun(*rebuild(m)), axis_size=axis_size)(mapped)

    calls, decline = [], []

    def evaluate_vjp(axis_size, args, in_batched, cotangent):
        calls.append((axis_size, jax.tree.leaves(in_batched)))
        if decline:
            return None
        x, a, b = (v if f else jnp.broadcast_to(v, (axis_size, *jnp.shape(v))) for v, f in zip(
            jax.tree.leaves(args), jax.tree.leaves(in_batched)))  # fmt: skip
        cs, cc = cotangent["s"], cotangent["c"]
        # d/dx: cos(x) a cs + cc; d/da: sin(x) cs; d/db: -sin(b) cc, the last marked by 2
        return (jnp.cos(x) * a * cs + cc, (jnp.sin(x) * cs, -2.0 * jnp.sin(b) * cc))

    routed = batched_route(fun, evaluate_batch, evaluate_vjp)
    x, pair = jnp.linspace(0.1, 1.0, 5), (jnp.asarray(2.0), jnp.asarray(0.3))

    def total(x, pair):
        out = routed(x, pair)
        return jnp.sum(out["s"]) + jnp.sum(out["c"])

    def batch_total(x, pair):
        return jnp.sum(jax.vmap(total, in_axes=(0, None))(x, pair))

    # Reverse mode of the batch: the evaluator's cotangents (b's marked by 2), the shared
    # arguments' summed over the batch (closed forms; round-off only, hence 1e-15 relative).
    gx, (ga, gb) = jax.jit(jax.grad(batch_total, argnums=(0, 1)))(x, pair)
    assert calls == [(5, [True, False, False])]
    assert_close(gx, 2.0 * jnp.cos(x) + 1.0, 1e-15, "grad(vmap) in the batched argument")
    assert_close(ga, jnp.sum(jnp.sin(x)), 1e-15, "grad(vmap) in a shared argument")
    assert_close(gb, -2.0 * 5.0 * jnp.sin(0.3), 1e-15, "grad(vmap): the evaluator's cotangent")
    assert_close(jax.vmap(jax.grad(total), in_axes=(0, None))(x, pair), 2.0 * jnp.cos(x) + 1.0, 1e-15, "vmap(grad)")
    assert len(calls) == 2
    # One sample (no vmap): the plain VJP, b's cotangent unmarked.
    assert_close(jax.grad(total, argnums=1)(x[1], pair)[1], -jnp.sin(0.3), 1e-15, "grad of one sample")
    assert len(calls) == 2
    # Declined: the plain VJP under vmap.
    decline.append(True)
    assert_close(jax.grad(batch_total, argnums=1)(x, pair)[1], -5.0 * jnp.sin(0.3), 1e-15, "declined: plain VJP")
    assert len(calls) == 3
    # Nested vmap under jit (declined: the plain VJP, under both levels).
    xx = jnp.stack([x, 2.0 * x])
    grid = jax.jit(
        jax.grad(lambda xx: jnp.sum(jax.vmap(jax.vmap(total, in_axes=(0, None)), in_axes=(0, None))(xx, pair)))
    )
    assert_close(grid(xx), 2.0 * jnp.cos(xx) + 1.0, 1e-15, "grad of a nested vmap")
    decline.clear()
    # Second derivatives and forward mode: the plain function's. d2/dx2 = -a sin x; the mixed
    # d2/dx da = cos x (forward over reverse and reverse over reverse).
    second = jax.vmap(jax.grad(jax.grad(total)), in_axes=(0, None))(x, pair)
    assert_close(second, -2.0 * jnp.sin(x), 1e-15, "grad(grad)")
    mixed = jax.jacfwd(lambda p: jax.grad(batch_total)(x, p))(pair)[0]
    assert_close(mixed, jnp.cos(x), 1e-15, "forward over reverse")
    mixed = jax.jacrev(lambda p: jax.grad(batch_total)(x, p))(pair)[0]
    assert_close(mixed, jnp.cos(x), 1e-15, "reverse over reverse")
    hess = jax.hessian(lambda x: batch_total(x, pair))(x)
    assert_close(hess, jnp.diag(-2.0 * jnp.sin(x)), 1e-15, "hessian")
    jac = jax.jacfwd(lambda x: jax.vmap(routed, in_axes=(0, None))(x, pair)["s"])(x)
    assert_close(jac, jnp.diag(2.0 * jnp.cos(x)), 1e-15, "jacfwd of the batch")


@pytest.mark.parametrize("dtype, rtol", [(jnp.float64, 1e-12), (jnp.float32, 1e-4)])
def test_chunked_inverse_dynamics_equals_per_sample(monkeypatch, dtype, rtol):
    """Under vmap, inverse dynamics runs in chunks (lax.map) when the batch exceeds a chunk:
    its values must equal the per-sample path at the chunk boundaries and in the remainder,
    with a shared model and with a batch of models (link masses), on a tree with branches,
    prismatic joints, springs and end-point loads. Derivatives are not chunked (the wrapper's
    JVP rule differentiates the plain pass along the arguments that carry a tangent): reverse
    mode per sample and through the whole batch and forward mode through it must equal the
    per-sample derivatives. Tolerances (relative to the largest entry): round-off of a
    14-link Newton-Euler pass and its derivative evaluated in another order, measured at most
    5.7e-14 in float64 and 3.1e-5 in float32 (the gradient with respect to the model's
    parameters, ~250 epsilon), with 17x and 3x headroom."""
    from sdjax import batch_kernel, dynamics

    monkeypatch.setattr(dynamics, "INVERSE_DYNAMICS_CHUNK_BUDGET", 32 * 15)  # 32 samples of 15 bodies
    monkeypatch.setenv(batch_kernel.KERNEL_ENV, "jax")  # (the XLA path's chunks; the kernel serves batches of 16)
    jax.clear_caches()  # (the chunk is chosen when a batch is traced: no trace made before the patch)
    model = random_model(7, 14, gravity=True, passive=True).astype(dtype)
    batch = 75  # two chunks of 32 and a remainder of 11
    rng = np.random.default_rng(7)
    states = jax.tree.map(
        lambda *xs: jnp.stack(xs).astype(dtype), *[random_state(model, 700 + k) for k in range(batch)]
    )
    base_acc = jnp.asarray(rng.normal(size=(batch, 6)), dtype)
    qdd = jnp.asarray(rng.normal(size=(batch, model.num_joints)), dtype)
    forces = jnp.asarray(rng.normal(size=(batch, model.num_end_points, 3)), dtype)
    masses = jnp.asarray(rng.uniform(0.5, 2.0, size=(batch, model.num_joints)), dtype) * model.link_mass

    def inverse(m, s, a, qdd, f):
        return jnp.concatenate(sdjax.inverse_dynamics(m, s, a, qdd, end_point_force=f))

    def with_mass(mass, s, a, qdd, f):
        return inverse(eqx.tree_at(lambda m: m.link_mass, model, mass), s, a, qdd, f)

    weights = jnp.asarray(rng.normal(size=6 + model.num_joints), dtype)  # a linear loss: its gradient is J^T w
    loss = lambda m, s, a, qdd, f: jnp.sum(weights * inverse(m, s, a, qdd, f))
    batched = (states, base_acc, qdd, forces)
    # The chunked path is taken: the batch of 75 runs as a loop over chunks (a scan).
    assert "scan[" in str(jax.make_jaxpr(jax.vmap(inverse, in_axes=(None, 0, 0, 0, 0)))(model, *batched))
    values = jax.jit(jax.vmap(inverse, in_axes=(None, 0, 0, 0, 0)))(model, *batched)
    values_of_masses = jax.jit(jax.vmap(with_mass))(masses, *batched)
    grads = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1, 2, 3, 4)), in_axes=(None, 0, 0, 0, 0)))(model, *batched)
    per_sample_grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3, 4)))
    for k in (0, 31, 32, 63, 64, 74):
        sample = jax.tree.map(lambda x: x[k], batched)
        assert_close(values[k], inverse(model, *sample), rtol, f"chunked value, sample {k}")
        assert_close(values_of_masses[k], with_mass(masses[k], *sample), rtol, f"batch of models, sample {k}")
        expected = per_sample_grad(model, *sample)
        for ours, ref in zip(jax.tree.map(lambda x: x[k], grads), expected):
            for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(ref)):
                assert_close(a, b, rtol, f"chunked gradient, sample {k}")
    # Reverse mode through the whole chunked batch: the shared model's gradient is the sum of
    # the per-sample ones; forward mode through it: the derivative along the joint
    # accelerations is the per-sample inverse dynamics' (linear in qdd: H_qdd columns).
    model_grad = jax.jit(jax.grad(lambda m: jnp.sum(jax.vmap(loss, in_axes=(None, 0, 0, 0, 0))(m, *batched))))(model)
    for a, b in zip(jax.tree.leaves(model_grad), jax.tree.leaves(jax.tree.map(lambda x: jnp.sum(x, axis=0), grads[0]))):
        assert_close(a, b, rtol, "gradient of a chunked batch wrt the shared model")
    direction = jnp.asarray(rng.normal(size=qdd.shape), dtype)
    _, tangent = jax.jit(
        lambda d: jax.jvp(
            lambda x: jax.vmap(inverse, in_axes=(None, 0, 0, 0, 0))(model, states, base_acc, x, forces), (qdd,), (d,)
        )
    )(direction)
    for k in (0, 40, 74):
        sample = jax.tree.map(lambda x: x[k], batched)
        _, expected = jax.jvp(lambda x: inverse(model, sample[0], sample[1], x, sample[3]), (qdd[k],), (direction[k],))
        assert_close(tangent[k], expected, rtol, f"forward mode through the chunked batch, sample {k}")
