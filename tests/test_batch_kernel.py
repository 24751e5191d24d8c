"""The compiled batch kernel (:mod:`sdjax.batch_kernel`) against the JAX reference path.

Batched forward dynamics on the CPU runs in a Numba kernel when Numba is installed; every
result must equal the per-sample JAX code (``vmap`` of ``_solve_forward_dynamics``, which never
enters the kernel) on trees with branches and prismatic joints, in every base mode, with
end-point and base loads, passive joints, gravity, shared or batched models, float64 and
float32, under nested ``vmap``, ``jit`` and ``lax.scan``. Reverse mode of a batch passes
through the kernel's vector-Jacobian products, which must equal JAX's reverse mode of the
per-sample code; every other derivative is the reference path's.
"""

from __future__ import annotations

import os
import pathlib
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax import batch_kernel, dynamics
from sdjax.models import free_flying_arm_7dof, random_model
from helpers import assert_close, random_state

pytest.importorskip("numba")


@pytest.fixture(autouse=True, scope="module")
def _kernel_for_small_batches():
    """The public path gives batches of MIN_BATCH and more to the kernel; these tests use
    small batches, so every batch goes there. The routing is decided when a function is traced:
    traces made by earlier modules are dropped here, this module's at its end."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(batch_kernel, "MIN_BATCH", 1)
        patch.setattr(batch_kernel, "MIN_ROLLOUT_BATCH", 1)
        jax.clear_caches()
        yield
    jax.clear_caches()


#: What decides, at trace time, which path a batch takes (besides MIN_BATCH above).
_ROUTING_ENV = (batch_kernel.KERNEL_ENV, batch_kernel.CALL_ENV)


@pytest.fixture(autouse=True)
def _traces_of_another_routing_dropped(monkeypatch):
    """After a test that changed the routing (``SDJAX_KERNEL``, ``SDJAX_KERNEL_CALL``, a patched
    ``_run``), drop its traces, so that later tests trace their functions afresh; the other tests
    keep theirs (dropping them after every test cost this module 10 % of its time: 156 s -> 140 s,
    2 workers, cold compilation cache). Runs before ``monkeypatch`` undoes the test's changes."""
    before = [os.environ.get(name) for name in _ROUTING_ENV], batch_kernel._run
    yield
    if ([os.environ.get(name) for name in _ROUTING_ENV], batch_kernel._run) != before:
        jax.clear_caches()


# Tolerances. float64: round-off of a solve with up to 26 unknowns in another summation order
# (observed <= 2e-12 relative to the largest acceleration, on inertia matrices with condition
# numbers up to ~1e4). float32: epsilon 1.2e-7 times that condition number, with headroom.
RTOL = {jnp.float64: 1e-10, jnp.float32: 3e-3}


def _batch(model, batch, seed, dtype):
    """States and controls (torques, base and end-point loads) of ``batch`` random samples."""
    rng = np.random.default_rng(seed)
    states = jax.tree.map(
        lambda *xs: jnp.stack(xs).astype(dtype), *[random_state(model, seed + k) for k in range(batch)]
    )
    n, ne = model.num_joints, model.num_end_points
    controls = dynamics.Controls(
        jnp.asarray(rng.normal(size=(batch, n)), dtype),
        jnp.asarray(rng.normal(size=(batch, 3)), dtype),
        jnp.asarray(rng.normal(size=(batch, 3)), dtype),
        jnp.asarray(rng.normal(size=(batch, ne, 3)), dtype),
        jnp.asarray(rng.normal(size=(batch, ne, 3)), dtype),
    )
    return states, controls


def test_kernels_command_compiles_every_entry_kernel(capsys, monkeypatch):
    """``sdjax kernels`` builds a call of every kernel XLA calls (``batch_kernel.ENTRY_KERNELS``,
    which ``_call`` checks each call against) in both precisions, so that the caches it fills
    serve every route; it refuses where the kernels are not in use. First in this module: on a
    cold cache the kernels it compiles serve the tests below."""
    from sdjax.cli import main

    # (what earlier tests of this process called, and their traces, must not count for the command)
    monkeypatch.setattr(batch_kernel, "_called", set())
    jax.clear_caches()
    assert main(["kernels"]) == 0
    out = capsys.readouterr().out
    count = len(batch_kernel.ENTRY_KERNELS)
    assert f"float64: {count} kernels ready" in out and f"float32: {count} kernels ready" in out, out
    # every kernel in both precisions, and nothing else (no precision leaking into the other)
    expected = {(name, p) for name in batch_kernel.ENTRY_KERNELS for p in ("float64", "float32")}
    assert batch_kernel.kernels_called() == expected
    monkeypatch.setenv(batch_kernel.KERNEL_ENV, "jax")
    assert main(["kernels", "--precision", "float32"]) == 1
    assert "the batch kernels are not in use here" in capsys.readouterr().err


def _reference(model, states, controls, model_axis=None):
    """vmap of the per-sample solve: the XLA path, never the kernel."""
    return jax.jit(jax.vmap(dynamics._solve_forward_dynamics, in_axes=(model_axis, 0, 0)))(model, states, controls)


def _kernel(model, states, controls, batched_model=False, with_factor=True):
    flags = (
        jax.tree.map(lambda _: batched_model, model),
        jax.tree.map(lambda _: True, states),
        jax.tree.map(lambda _: True, controls),
    )
    batch = states.q.shape[0]
    return jax.jit(lambda m, s, c: batch_kernel.solve_forward_dynamics(batch, m, s, c, flags, with_factor=with_factor))(
        model, states, controls
    )


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
@pytest.mark.parametrize("base", ["floating", "planar", "fixed"])
def test_kernel_equals_reference(base, dtype):
    """Accelerations and Cholesky factors equal the reference on a branched tree with
    prismatic joints, gravity, passive joints and loads on every input, in each base mode; so
    do the accelerations solved without the factor (the sparse factorisation along the tree)."""
    model = sdjax.edit_model(random_model(11, 12, gravity=True, passive=True), base=base).astype(dtype)
    states, controls = _batch(model, 37, 3, dtype)
    # The base moves only along the components its mode leaves free.
    free = np.isin(np.arange(6), model.base_coordinates).astype(np.dtype(dtype))
    states = eqx.tree_at(
        lambda s: (s.base_linear_velocity, s.base_angular_velocity),
        states,
        (states.base_linear_velocity * free[:3], states.base_angular_velocity * free[3:]),
    )
    acceleration, factor = _kernel(model, states, controls)
    expected_acceleration, expected_factor = _reference(model, states, controls)
    assert acceleration.dtype == dtype and factor.shape == expected_factor.shape
    assert_close(acceleration, expected_acceleration, RTOL[dtype], f"{base} accelerations")
    assert_close(factor, expected_factor, RTOL[dtype], f"{base} Cholesky factor")
    # Without the factor: the sparse factorisation along the tree where the tree is bushy
    # enough (here the planar and fixed bases), else the dense one.
    unfactored, no_factor = _kernel(model, states, controls, with_factor=False)
    assert no_factor is None
    assert_close(unfactored, expected_acceleration, RTOL[dtype], f"{base} accelerations without the factor")


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_sparse_factorisation_on_branched_trees(dtype):
    """Branched trees solve by the sparse factorisation that follows the tree (a chain keeps the
    dense one): the accelerations equal the reference on shallow floating-base trees of 12 and
    30 links with prismatic joints, gravity, passive joints and loads."""
    assert len(batch_kernel._topology(free_flying_arm_7dof())[4]) == 0  # (a chain: dense)
    for seed, links in ((5, 12), (3, 30)):
        model = random_model(seed, links, chain_probability=0.25, gravity=True, passive=True).astype(dtype)
        assert len(batch_kernel._topology(model)[4]) == model.num_velocities  # (the sparse path)
        states, controls = _batch(model, 9, 5, dtype)
        ours, _ = _kernel(model, states, controls, with_factor=False)
        expected, _ = _reference(model, states, controls)
        assert_close(ours, expected, RTOL[dtype], f"{links}-link tree, {jnp.dtype(dtype).name}")


def test_batched_models_and_shared_states():
    """Each leaf may be batched or shared: a batch of models (different masses and geometry)
    with one shared state."""
    models = [random_model(21, 9, gravity=True, passive=True)]
    rng = np.random.default_rng(0)
    for k in range(5):
        models.append(jax.tree.map(lambda x: x * (1 + 0.2 * rng.uniform()), models[0]))
    stacked = sdjax.stack_models(models)
    state = random_state(models[0], 4)
    tau = jnp.asarray(rng.normal(size=models[0].num_joints))
    ours = jax.jit(jax.vmap(lambda m: sdjax.forward_dynamics(m, state, tau)))(stacked)
    for k, m in enumerate(models):
        expected = dynamics._solve_forward_dynamics(m, state, dynamics.make_controls(m, tau))[0]
        assert_close(jnp.concatenate([ours[0][k], ours[1][k]]), expected, RTOL[jnp.float64], f"model {k}")
    # Every input batched (nothing shared to pack).
    states, controls = _batch(models[0], len(models), 6, jnp.float64)
    ours = jax.jit(jax.vmap(dynamics.floating_acceleration))(stacked, states, controls)
    for k, m in enumerate(models):
        pick = lambda x: x[k]  # noqa: E731
        expected = dynamics._solve_forward_dynamics(m, jax.tree.map(pick, states), jax.tree.map(pick, controls))[0]
        assert_close(ours[k], expected, RTOL[jnp.float64], f"all inputs batched, model {k}")


def test_public_path_uses_kernel_and_matches(monkeypatch):
    """``jit(vmap(forward_dynamics))`` enters the kernel (counted) and gives the reference
    values; inside ``lax.scan`` too; ``SDJAX_KERNEL=jax`` keeps the XLA path."""
    model = free_flying_arm_7dof()
    states, controls = _batch(model, 16, 9, jnp.float64)
    calls = _counting_kernels(monkeypatch)
    fd = jax.jit(jax.vmap(lambda s, c: dynamics.floating_acceleration(model, s, c)))
    ours = fd(states, controls)
    assert calls, "the batched forward dynamics did not enter the kernel"
    assert_close(ours, _reference(model, states, controls)[0], RTOL[jnp.float64], "public batched forward dynamics")

    def steps(carry, _):
        return carry, jax.vmap(lambda s, c: dynamics.floating_acceleration(model, s, c))(states, controls)

    scanned = jax.jit(lambda: jax.lax.scan(steps, 0.0, None, length=3)[1])()
    assert_close(scanned[-1], ours, 1e-15, "inside lax.scan")  # the same kernel on the same inputs
    monkeypatch.setenv(batch_kernel.KERNEL_ENV, "jax")
    assert not batch_kernel.available()
    monkeypatch.setenv(batch_kernel.KERNEL_ENV, "fast")
    with pytest.raises(ValueError, match="SDJAX_KERNEL='fast'"):
        batch_kernel.available()
    jax.clear_caches()


def test_nested_vmap():
    """vmap of vmap: each outer index is a batch of its own (the kernel sees broadcast inputs)."""
    model = random_model(4, 6, gravity=True)
    states, controls = _batch(model, 12, 17, jnp.float64)
    grid = jax.tree.map(lambda x: x.reshape((3, 4) + x.shape[1:]), (states, controls))
    inner = jax.vmap(lambda s, c: dynamics.floating_acceleration(model, s, c))
    ours = jax.jit(jax.vmap(inner))(*grid)
    expected = _reference(model, states, controls)[0].reshape(3, 4, -1)
    assert_close(ours, expected, RTOL[jnp.float64], "nested vmap")


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_ffi_call_equals_callback(dtype, monkeypatch):
    """Every kernel called as an XLA FFI custom call (the default: buffers in place, chunks on
    XLA's thread pool; the lowered program names each kernel's target) gives exactly what the
    same kernel gives through ``jax.pure_callback`` (``SDJAX_KERNEL_CALL=callback``): forward
    and inverse dynamics, ``H``, an open-loop rollout, a closed loop's RK4 steps, a nested
    ``vmap``, and in float64 the reverse modes (of the dynamics and of the closed loop's steps),
    on a branched tree with prismatic and passive joints, an odd batch (13: chunks of unequal
    size)."""
    model = random_model(23, 7, chain_probability=0.4, gravity=True, passive=True).astype(dtype)
    assert not all(t == "R" for t in model.joint_type) and len(set(model.parent)) < model.num_joints
    states, controls = _batch(model, 13, 5, dtype)

    def loss(m, s, c):
        acceleration = jax.vmap(lambda s, c: dynamics.floating_acceleration(m, s, c))(s, c)
        wrench, tau = jax.vmap(lambda s, a: sdjax.inverse_dynamics(m, s, a[:6], a[6:]))(s, jnp.sin(acceleration))
        held = jax.tree.map(lambda x: jnp.stack([x, 0.5 * x, -x], axis=1), c)  # (3 steps per sample)
        open_loop = jax.vmap(lambda s, c: sdjax.rollout(m, s, 0.01, 3, c).states.q[-1])(s, held)

        def closed_loop(state, c):
            law = lambda t, x: eqx.tree_at(lambda c: c.tau, c, -2.0 * x.q - 0.3 * x.qd)  # noqa: E731
            return sdjax.rollout(m, state, 0.01, 2, law).states.qd[-1]

        closed = jax.vmap(closed_loop)(s, c)
        return sum(jnp.sum(jnp.cos(x)) for x in (acceleration, wrench, tau, open_loop, closed))

    def program(m, s, c):
        grid = jax.tree.map(lambda x: x[:12].reshape((3, 4) + x.shape[1:]), (s, c))
        values = (
            loss(m, s, c),
            jax.vmap(lambda s: sdjax.inertia_matrix(m, s))(s),
            jax.vmap(jax.vmap(lambda s, c: dynamics.floating_acceleration(m, s, c)))(*grid),
        )
        return values + ((jax.grad(loss, argnums=(0, 1, 2))(m, s, c),) if dtype == jnp.float64 else ())

    kernels = ["forward_dynamics", "inverse_dynamics_range", "inertia_matrix_range", "rk4_rollout"]
    if dtype == jnp.float64:
        kernels += ["forward_dynamics_vjp_range", "inverse_dynamics_vjp_range", "rk4_step_vjp_range"]
    text = jax.jit(program).lower(model, states, controls).as_text()
    for kernel in kernels:
        assert f"@sdjax_{kernel}_" in text, f"{kernel}: no FFI custom call in the lowered program"
    ours = jax.jit(program)(model, states, controls)
    monkeypatch.setenv(batch_kernel.CALL_ENV, "callback")
    jax.clear_caches()
    assert "@sdjax_" not in jax.jit(program).lower(model, states, controls).as_text()
    expected = jax.jit(program)(model, states, controls)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(expected), strict=True):
        assert a.dtype == dtype or not jnp.issubdtype(a.dtype, jnp.floating)
        np.testing.assert_array_equal(a, b)  # (the same compiled kernels on the same numbers)
    assert ours[1].shape == (13, model.num_velocities, model.num_velocities) and ours[2].shape[:2] == (3, 4)


def _vma_flags(address: int) -> list[str] | None:
    """The ``VmFlags`` of the mapping of this process that holds ``address`` (Linux's
    ``/proc/self/smaps``), or None where there is no such file."""
    try:
        text = pathlib.Path("/proc/self/smaps").read_text()
    except OSError:
        return None
    inside = False
    for line in text.splitlines():
        head = line.split()[0]
        if "-" in head and all(c in "0123456789abcdef-" for c in head):
            first, last = (int(x, 16) for x in head.split("-"))
            inside = first <= address < last
        elif inside and head == "VmFlags:":
            return line.split()[1:]
    return None


def test_large_results_ask_for_huge_pages(monkeypatch):
    """A kernel result of at least HUGE_PAGE_MIN_BYTES (here 5 MB of inertia matrices of a
    30-link tree) is written into XLA's buffer after asking Linux for transparent huge pages
    over it (``madvise(MADV_HUGEPAGE)``: the mapping's ``hg`` flag), and holds exactly what the
    same kernel gives through ``jax.pure_callback``, which asks nothing."""
    from sdjax import _kernel_ffi

    model = random_model(41, 30, chain_probability=0.6)
    batch = 480
    nv = model.num_velocities
    assert batch * nv * nv * 8 >= _kernel_ffi.HUGE_PAGE_MIN_BYTES
    rng = np.random.default_rng(8)
    base = random_state(model, 3)
    states = jax.tree.map(lambda x: jnp.asarray(x + 0.1 * rng.normal(size=(batch,) + x.shape)), base)
    inertia = jax.jit(jax.vmap(lambda s: sdjax.inertia_matrix(model, s)))
    assert "@sdjax_inertia_matrix_range_" in inertia.lower(states).as_text()
    ours = inertia(states)
    enabled = pathlib.Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if sys.platform.startswith("linux") and enabled.exists() and "[never]" not in enabled.read_text():
        start = ours.unsafe_buffer_pointer()
        huge = 2 << 20
        inside = -(-start // huge) * huge  # (the first whole huge page of the buffer)
        flags = _vma_flags(inside)
        assert flags is not None and "hg" in flags, f"no huge-page advice on the result: {flags}"
    monkeypatch.setenv(batch_kernel.CALL_ENV, "callback")
    jax.clear_caches()
    expected = jax.jit(jax.vmap(lambda s: sdjax.inertia_matrix(model, s)))(states)
    np.testing.assert_array_equal(ours, expected)  # (the same compiled kernel on the same numbers)


def test_kernel_entries_directory(tmp_path, monkeypatch):
    """The generated kernel entries go to ``SDJAX_KERNEL_ENTRIES`` (``kernel_entries`` in it),
    or to a fresh temporary directory where that cannot be written (here a file's path)."""
    from sdjax import _kernel_ffi

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    try:
        monkeypatch.setenv(_kernel_ffi.ENTRIES_ENV, str(tmp_path / "entries"))
        _kernel_ffi._entries_directory.cache_clear()
        assert _kernel_ffi._entries_directory() == tmp_path / "entries" / "kernel_entries"
        monkeypatch.setenv(_kernel_ffi.ENTRIES_ENV, str(blocker))
        _kernel_ffi._entries_directory.cache_clear()
        fallback = _kernel_ffi._entries_directory()
        assert fallback.is_dir() and tmp_path not in fallback.parents
    finally:
        _kernel_ffi._entries_directory.cache_clear()  # (the session's directory again after the test)


def test_derivatives_unchanged():
    """Gradients through a batched forward dynamics (which the kernel serves in the forward
    pass) equal the per-sample gradients of the XLA path, with respect to the model, the
    state and the torques."""
    model = random_model(8, 7, gravity=True, passive=True)
    states, controls = _batch(model, 6, 2, jnp.float64)

    def loss(m, s, c):
        return jnp.sum(jnp.sin(dynamics.floating_acceleration(m, s, c)))

    batched = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1, 2)), in_axes=(None, 0, 0)))(model, states, controls)
    per_sample = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
    for k in range(states.q.shape[0]):
        sample = jax.tree.map(lambda x: x[k], (states, controls))
        expected = per_sample(model, *sample)
        for a, b in zip(jax.tree.leaves(jax.tree.map(lambda x: x[k], batched)), jax.tree.leaves(expected)):
            assert_close(a, b, 1e-10, f"gradient, sample {k}")  # (round-off of two solves, as above)


def test_optional_dependency():
    """``import sdjax`` does not import Numba, and without Numba batched forward dynamics runs
    on the XLA path (a fresh interpreter in which ``import numba`` fails)."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['numba'] = None\n"  # makes `import numba` raise ImportError
        "import jax, jax.numpy as jnp\n"
        "import sdjax\n"
        "from sdjax import batch_kernel\n"
        "from sdjax.models import spacedyn_sample\n"
        "assert not batch_kernel.available()\n"
        "m = spacedyn_sample()\n"
        "s = jax.vmap(lambda q: sdjax.make_state(m, q=q))(jnp.zeros((256, m.num_joints)))\n"
        "a = jax.vmap(lambda st: sdjax.forward_dynamics(m, st)[1])(s)\n"
        "assert a.shape == (256, m.num_joints) and bool(jnp.all(jnp.isfinite(a)))\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
    imported = subprocess.run(
        [sys.executable, "-c", "import sys, sdjax; print('numba' in sys.modules)"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert imported.stdout.strip() == "False", imported.stderr[-2000:]


def test_batch_of_leaves_the_dynamics_does_not_read():
    """A batch over the base position only (which forward dynamics does not depend on) gives
    the unbatched accelerations for every sample."""
    model = random_model(6, 5, gravity=True)
    state = random_state(model, 1)
    positions = jnp.asarray(np.random.default_rng(3).normal(size=(9, 3)))
    ours = jax.jit(
        jax.vmap(
            lambda p: dynamics.floating_acceleration(
                model, eqx.tree_at(lambda s: s.base_position, state, p), dynamics.make_controls(model)
            )
        )
    )(positions)
    expected = dynamics._solve_forward_dynamics(model, state, dynamics.make_controls(model))[0]
    assert_close(ours, jnp.broadcast_to(expected, ours.shape), RTOL[jnp.float64], "batch over the base position")


# ------------------------------------------------------------------------------------------
# Inverse dynamics and the inertia matrix in the kernel.


def _motion_batch(model, batch, seed, dtype):
    """States, base and joint accelerations (the base's only along its free components) and
    end-point loads of ``batch`` random samples."""
    states, controls = _batch(model, batch, seed, dtype)
    free = np.isin(np.arange(6), model.base_coordinates).astype(np.dtype(dtype))
    rng = np.random.default_rng(seed + 1)
    base_acceleration = jnp.asarray(rng.normal(size=(batch, 6)) * free, dtype)
    qdd = jnp.asarray(rng.normal(size=(batch, model.num_joints)), dtype)
    return states, base_acceleration, qdd, controls.end_point_force, controls.end_point_torque


def _inverse_dynamics(model):
    def one(state, base_acceleration, qdd, force, torque):
        return sdjax.inverse_dynamics(
            model, state, base_acceleration, qdd, end_point_force=force, end_point_torque=torque
        )

    return one


def _per_sample(fun, *batched):
    """``fun`` on each sample of ``batched`` (leading axis), jit without vmap: the XLA path,
    stacked."""
    one = jax.jit(fun)
    outs = [one(*jax.tree.map(lambda x: x[k], batched)) for k in range(jax.tree.leaves(batched)[0].shape[0])]
    return jax.tree.map(lambda *xs: jnp.stack(xs), *outs)


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
@pytest.mark.parametrize("base", ["floating", "planar", "fixed"])
def test_inverse_dynamics_and_inertia_matrix_kernels_equal_reference(base, dtype, monkeypatch):
    """``jit(vmap(...))`` of ``inverse_dynamics``, ``inertia_matrix`` and ``bias_forces`` run in
    the kernel (counted) and equal the per-sample XLA code on a branched tree with prismatic joints,
    gravity, passive joints, base and joint accelerations and end-point loads, in each base
    mode; the inertia matrix in the base mode's free coordinates."""
    kernels = _counting_kernels(monkeypatch)
    model = sdjax.edit_model(random_model(11, 12, gravity=True, passive=True), base=base).astype(dtype)
    inputs = _motion_batch(model, 23, 4, dtype)
    inverse = _inverse_dynamics(model)
    ours = jax.jit(jax.vmap(inverse))(*inputs)
    assert kernels == ["inverse_dynamics_range"]
    expected = _per_sample(inverse, *inputs)
    assert ours[0].dtype == dtype and ours[1].shape == expected[1].shape
    # (Each output relative to its own largest entry: the base wrench and the joint torques
    # differ in scale.)
    assert_close(ours[0], expected[0], RTOL[dtype], f"{base} base wrench")
    assert_close(ours[1], expected[1], RTOL[dtype], f"{base} joint torques")
    inertia = lambda s: sdjax.inertia_matrix(model, s)  # noqa: E731
    h = jax.jit(jax.vmap(inertia))(inputs[0])
    assert kernels[-1] == "inertia_matrix_range"
    assert h.shape == (23, model.num_velocities, model.num_velocities)
    assert_close(h, _per_sample(inertia, inputs[0]), RTOL[dtype], f"{base} inertia matrix")
    # The bias forces: the inverse-dynamics kernel at zero accelerations, without the loads and
    # the passive joint torques (which bias_forces leaves out).
    bias = lambda s: sdjax.bias_forces(model, s)  # noqa: E731
    c = jax.jit(jax.vmap(bias))(inputs[0])
    assert kernels[-1] == "inverse_dynamics_range" and c.shape == (23, model.num_velocities)
    assert_close(c, _per_sample(bias, inputs[0]), RTOL[dtype], f"{base} bias forces")


def test_inverse_dynamics_and_inertia_matrix_kernels_shared_inputs_derivatives_and_mimic(monkeypatch):
    """A batch of models with shared motion inputs; gradients through the batched calls equal
    the per-sample gradients of the XLA path (reverse mode through the kernel's vector-Jacobian
    product, see below); a base
    without links; a model with mimic joints stays on the XLA path (no kernel call) with the
    same values."""
    kernels = _counting_kernels(monkeypatch)
    base_model = random_model(21, 9, gravity=True, passive=True)
    rng = np.random.default_rng(1)
    models = [base_model] + [jax.tree.map(lambda x: x * (1 + 0.2 * rng.uniform()), base_model) for _ in range(4)]
    stacked = sdjax.stack_models(models)
    states, base_acceleration, qdd, force, torque = _motion_batch(base_model, 1, 8, jnp.float64)
    shared = jax.tree.map(lambda x: x[0], (states, base_acceleration, qdd, force, torque))
    ours = jax.jit(
        jax.vmap(
            lambda m: sdjax.inverse_dynamics(
                m, shared[0], *shared[1:3], end_point_force=shared[3], end_point_torque=shared[4]
            )
        )
    )(stacked)
    h = jax.jit(jax.vmap(lambda m: sdjax.inertia_matrix(m, shared[0])))(stacked)
    assert kernels == ["inverse_dynamics_range", "inertia_matrix_range"]
    for k, m in enumerate(models):
        expected = _inverse_dynamics(m)(*shared)
        assert_close(ours[1][k], expected[1], RTOL[jnp.float64], f"joint torques, model {k}")
        assert_close(ours[0][k], expected[0], RTOL[jnp.float64], f"base wrench, model {k}")
        assert_close(h[k], sdjax.inertia_matrix(m, shared[0]), RTOL[jnp.float64], f"inertia matrix, model {k}")

    inputs = _motion_batch(base_model, 5, 9, jnp.float64)

    def loss(m, *motion):
        base_wrench, tau = _inverse_dynamics(m)(*motion)
        h, c = sdjax.inertia_matrix(m, motion[0]), sdjax.bias_forces(m, motion[0])
        return jnp.sum(jnp.sin(base_wrench)) + jnp.sum(jnp.sin(tau)) + jnp.sum(jnp.sin(h)) + jnp.sum(jnp.sin(c))

    gradient = jax.grad(loss, argnums=(0, 1, 2, 3))
    batched = jax.jit(jax.vmap(gradient, in_axes=(None, 0, 0, 0, 0, 0)))(base_model, *inputs)
    expected = _per_sample(lambda *motion: gradient(base_model, *motion), *inputs)
    for a, b in zip(jax.tree.leaves(batched), jax.tree.leaves(expected)):
        assert_close(a, b, 1e-12, "gradient")  # (the same XLA program per sample: round-off only)

    # A base without links (the kernel's joint loops empty, torques of shape (B, 0)). Tolerance:
    # round-off of one body's wrench and inertia summed in another order (RTOL's float64 case).
    del kernels[:]
    lone = random_model(2, 0, gravity=True)
    lone_states = _motion_batch(lone, 4, 12, jnp.float64)[0]
    lone_wrench, lone_tau = jax.jit(jax.vmap(lambda s: sdjax.inverse_dynamics(lone, s)))(lone_states)
    lone_h = jax.jit(jax.vmap(lambda s: sdjax.inertia_matrix(lone, s)))(lone_states)
    assert kernels == ["inverse_dynamics_range", "inertia_matrix_range"] and lone_tau.shape == (4, 0)
    assert_close(
        lone_wrench,
        _per_sample(lambda s: sdjax.inverse_dynamics(lone, s)[0], lone_states),
        RTOL[jnp.float64],
        "base only",
    )
    assert_close(
        lone_h, _per_sample(lambda s: sdjax.inertia_matrix(lone, s), lone_states), RTOL[jnp.float64], "base only, H"
    )

    del kernels[:]
    plain = random_model(5, 6, chain_probability=0.5, passive=True, gravity=True)
    mimic = sdjax.edit_model(plain, mimic_leader=(0, 0, 2, 0, 0, 4), mimic_multiplier=[1.0, 1.0, -0.7, 1.0, 1.0, 2.0])
    q = jnp.asarray(rng.uniform(-1, 1, size=(6, mimic.num_joint_coordinates)))  # (the mimic joints follow)
    mimic_states = jax.vmap(lambda x: sdjax.make_state(mimic, q=x))(q)
    tau = jax.jit(jax.vmap(lambda s: sdjax.inverse_dynamics(mimic, s)[1]))(mimic_states)
    h = jax.jit(jax.vmap(lambda s: sdjax.inertia_matrix(mimic, s)))(mimic_states)
    assert kernels == []
    # (The XLA path under vmap against the same code per sample: round-off only.)
    assert_close(tau, _per_sample(lambda s: sdjax.inverse_dynamics(mimic, s)[1], mimic_states), 1e-12, "mimic torques")
    assert_close(h, _per_sample(lambda s: sdjax.inertia_matrix(mimic, s), mimic_states), 1e-12, "mimic inertia matrix")


# ------------------------------------------------------------------------------------------
# Open-loop RK4 rollouts in the kernel.

# Rollout tolerances: the per-step round-off of the accelerations (RTOL above) carried through
# 20 RK4 steps of a system with velocities of order 1 (observed <= 3e-13 in float64, 2e-5 in
# float32, relative to each state component's largest magnitude).
ROLLOUT_RTOL = {jnp.float64: 1e-10, jnp.float32: 2e-3}
ROLLOUT_STEPS, ROLLOUT_DT = 20, 0.01


def _counting_kernels(monkeypatch) -> list:
    """Records the name of each kernel run (patched ``batch_kernel._run``, which the calls
    through ``jax.pure_callback`` pass: the FFI handler runs inside XLA, out of Python's sight;
    both calls run the same kernels on the same inputs: test_ffi_call_equals_callback)."""
    monkeypatch.setenv(batch_kernel.CALL_ENV, "callback")
    names = []
    original = batch_kernel._run
    monkeypatch.setattr(batch_kernel, "_run", lambda kernel, *a: (names.append(kernel.__name__), original(kernel, *a)))
    jax.clear_caches()
    return names


def _per_sample_rollouts(model, states, control, dt=ROLLOUT_DT, steps=ROLLOUT_STEPS):
    """Each sample's rollout without vmap: one lax.scan of rk4_step on the XLA path."""
    run = jax.jit(lambda s, c, h: sdjax.rollout(model, s, h, steps, c))
    out = []
    for k in range(states.q.shape[0]):
        pick = lambda x: x[k]  # noqa: E731
        sample_control = None if control is None else jax.tree.map(pick, control)
        out.append(run(jax.tree.map(pick, states), sample_control, dt[k] if jnp.ndim(dt) else dt))
    return jax.tree.map(lambda *xs: jnp.stack(xs), *out)


def _assert_trajectories(ours, expected, rtol, what):
    for name in ("base_position", "base_quaternion", "base_linear_velocity", "base_angular_velocity", "q", "qd"):
        assert_close(getattr(ours.states, name), getattr(expected.states, name), rtol, f"{what}: {name}")
    assert_close(ours.time, expected.time, 1e-15, f"{what}: time")  # (the same arange)
    for a, b in zip(jax.tree.leaves(ours.controls), jax.tree.leaves(expected.controls)):
        assert_close(a, b, 1e-15, f"{what}: recorded controls")  # (copies of the inputs)


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
@pytest.mark.parametrize("base", ["floating", "planar", "fixed"])
def test_rollout_kernel_equals_scan(base, dtype, monkeypatch):
    """A batch of open-loop RK4 rollouts runs in the kernel and equals each sample's
    ``lax.scan`` of :func:`sdjax.rk4_step` on a branched tree with prismatic joints, gravity,
    passive joints, and per-step torques, base and end-point loads, in every base mode."""
    model = sdjax.edit_model(random_model(11, 12, gravity=True, passive=True), base=base).astype(dtype)
    batch = 5
    states = jax.tree.map(
        lambda *xs: jnp.stack(xs).astype(dtype), *[random_state(model, 40 + k, scale=0.5) for k in range(batch)]
    )
    rng = np.random.default_rng(8)
    n, ne = model.num_joints, model.num_end_points
    loads = dynamics.Controls(
        *[
            jnp.asarray(rng.normal(size=(batch, ROLLOUT_STEPS) + shape), dtype)
            for shape in [(n,), (3,), (3,), (ne, 3), (ne, 3)]
        ]
    )
    names = _counting_kernels(monkeypatch)
    ours = jax.jit(jax.vmap(lambda s, c: sdjax.rollout(model, s, ROLLOUT_DT, ROLLOUT_STEPS, c)))(states, loads)
    assert names == ["rk4_rollout"], names
    assert ours.states.q.dtype == dtype and ours.states.q.shape == (batch, ROLLOUT_STEPS + 1, n)
    _assert_trajectories(
        ours, _per_sample_rollouts(model, states, loads), ROLLOUT_RTOL[dtype], f"{base} {jnp.dtype(dtype).name}"
    )


def test_rollout_kernel_shared_and_batched_inputs(monkeypatch):
    """Any input may be batched or shared: no control, one torque sequence for the whole batch,
    a batch of models, a batch of steps ``dt``."""
    model = random_model(31, 6, gravity=True, passive=True)
    batch = 4
    states = jax.tree.map(lambda *xs: jnp.stack(xs), *[random_state(model, 60 + k, scale=0.5) for k in range(batch)])
    names = _counting_kernels(monkeypatch)
    rollout = lambda m, s, c, h: sdjax.rollout(m, s, h, ROLLOUT_STEPS, c)  # noqa: E731
    free = jax.jit(jax.vmap(rollout, in_axes=(None, 0, None, None)))(model, states, None, ROLLOUT_DT)
    _assert_trajectories(free, _per_sample_rollouts(model, states, None), ROLLOUT_RTOL[jnp.float64], "no control")
    tau = jnp.asarray(np.random.default_rng(1).normal(size=(ROLLOUT_STEPS, model.num_joints)))
    shared = jax.jit(jax.vmap(rollout, in_axes=(None, 0, None, None)))(model, states, tau, ROLLOUT_DT)
    _assert_trajectories(
        shared,
        _per_sample_rollouts(model, states, jnp.broadcast_to(tau, (batch,) + tau.shape)),
        ROLLOUT_RTOL[jnp.float64],
        "shared torques",
    )
    steps = jnp.asarray([0.004, 0.007, 0.01, 0.013])
    by_dt = jax.jit(jax.vmap(rollout, in_axes=(None, 0, None, 0)))(model, states, None, steps)
    _assert_trajectories(
        by_dt, _per_sample_rollouts(model, states, None, steps), ROLLOUT_RTOL[jnp.float64], "batched dt"
    )
    rng = np.random.default_rng(2)
    models = sdjax.stack_models([jax.tree.map(lambda x: x * (1 + 0.2 * rng.uniform()), model) for _ in range(batch)])
    state = random_state(model, 5, scale=0.5)
    by_model = jax.jit(jax.vmap(rollout, in_axes=(0, None, None, None)))(models, state, None, ROLLOUT_DT)
    for k in range(batch):
        expected = jax.jit(lambda m: sdjax.rollout(m, state, ROLLOUT_DT, ROLLOUT_STEPS))(
            jax.tree.map(lambda x: x[k], models)
        )
        assert_close(by_model.states.q[k], expected.states.q, ROLLOUT_RTOL[jnp.float64], f"batched model {k}")
    assert names == ["rk4_rollout"] * 4, names


def test_rollout_kernel_only_for_open_loop_rk4(monkeypatch):
    """Feedback laws, environment loads and other integrators need XLA between steps: a
    feedback law's RK4 rollout enters the kernel once per step (the step with its torques held),
    environment loads (evaluated at every stage) and other integrators never enter the rollout
    kernel (their forward dynamics enter the other)."""
    model = random_model(3, 5)
    states = jax.tree.map(lambda *xs: jnp.stack(xs), *[random_state(model, k) for k in range(3)])
    names = _counting_kernels(monkeypatch)
    law = lambda t, s: -s.qd  # noqa: E731
    jax.block_until_ready(jax.jit(jax.vmap(lambda s: sdjax.rollout(model, s, 0.01, 4, law)))(states))
    assert names == ["rk4_rollout"] * 4, names
    names.clear()
    environment = lambda t, s: dynamics.make_controls(model, tau=-s.q)  # noqa: E731
    for kwargs in ({"environment": environment}, {"integrator": "euler"}):
        jax.block_until_ready(jax.jit(jax.vmap(lambda s: sdjax.rollout(model, s, 0.01, 4, **kwargs)))(states))
    assert "rk4_rollout" not in names and "forward_dynamics" in names, names


def test_rollout_kernel_gradients_and_checks(monkeypatch):
    """Gradients of batched rollouts (the kernel serves the forward pass) equal the per-sample
    gradients of the scan, for the initial state and the torque sequence, with and without
    ``checkpoint``; ``check=True`` reports a state that turns non-finite."""
    model = random_model(12, 5, gravity=True, passive=True)
    batch = 3
    states = jax.tree.map(lambda *xs: jnp.stack(xs), *[random_state(model, 70 + k, scale=0.5) for k in range(batch)])
    tau = jnp.asarray(np.random.default_rng(4).normal(size=(batch, 8, model.num_joints)))

    def loss(s, c, checkpoint):
        trajectory = sdjax.rollout(model, s, ROLLOUT_DT, 8, c, checkpoint=checkpoint)
        return jnp.sum(jnp.sin(trajectory.states.q[-1])) + jnp.sum(trajectory.states.base_angular_velocity[-1] ** 2)

    for checkpoint in (False, True):
        ours = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1)), in_axes=(0, 0, None)), static_argnums=2)(
            states, tau, checkpoint
        )
        for k in range(batch):
            expected = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)(
                jax.tree.map(lambda x: x[k], states), tau[k], checkpoint
            )
            for a, b in zip(jax.tree.leaves(jax.tree.map(lambda x: x[k], ours)), jax.tree.leaves(expected)):
                assert_close(
                    a, b, 1e-9, f"gradient, sample {k}, checkpoint={checkpoint}"
                )  # (round-off of 8 steps' solves)
    names = _counting_kernels(monkeypatch)
    bad = eqx.tree_at(lambda s: s.qd, states, states.qd.at[1, 0].set(jnp.inf))
    with pytest.raises(Exception, match="non-finite"):
        jax.block_until_ready(
            jax.jit(jax.vmap(lambda s: sdjax.rollout(model, s, ROLLOUT_DT, 4, check=True).states.q))(bad)
        )
    assert names == ["rk4_rollout"], names


@pytest.mark.parametrize("kernel", ["auto", "jax"])
def test_gradient_of_a_batch_of_rollouts(kernel, monkeypatch):
    """``grad`` of a loss summed over ``vmap`` of open-loop rollouts (the batch's gradient with
    respect to a shared model and to each sample's state and torques, as a multi-start planner
    takes it) equals the sum of the per-sample gradients of the scan; with the kernel and on
    the XLA path (where forward over reverse, a Hessian-vector product, is checked against
    central differences of the gradient too). It failed with a shape error in JAX's
    linearization of the batched rollout before its primal output was put batch-first."""
    monkeypatch.setenv(batch_kernel.KERNEL_ENV, kernel)
    model = random_model(31, 5, chain_probability=0.5, gravity=True, passive=True)
    batch, steps = 3, 6
    states = jax.tree.map(lambda *xs: jnp.stack(xs), *[random_state(model, 90 + k, scale=0.5) for k in range(batch)])
    tau = jnp.asarray(np.random.default_rng(5).normal(size=(batch, steps, model.num_joints)))

    def loss(masses, s, c):
        m = eqx.tree_at(lambda m: m.link_mass, model, masses)
        trajectory = sdjax.rollout(m, s, ROLLOUT_DT, steps, c)
        return jnp.sum(jnp.sin(trajectory.states.q)) + jnp.sum(trajectory.states.base_angular_velocity[-1] ** 2)

    def batch_loss(masses, s, c):
        return jnp.sum(jax.vmap(loss, in_axes=(None, 0, 0))(masses, s, c))

    ours = jax.jit(jax.grad(batch_loss, argnums=(0, 1, 2)))(model.link_mass, states, tau)
    per_sample = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
    samples = [per_sample(model.link_mass, *jax.tree.map(lambda x: x[k], (states, tau))) for k in range(batch)]
    # (round-off of 6 steps' solves, summed over 3 samples)
    assert_close(ours[0], sum(g[0] for g in samples), 1e-9, "gradient, shared masses")
    for k in range(batch):
        for a, b in zip(jax.tree.leaves(jax.tree.map(lambda x: x[k], ours[1:])), jax.tree.leaves(samples[k][1:])):
            assert_close(a, b, 1e-9, f"gradient, sample {k}")
    if kernel == "jax":
        direction = jnp.asarray(np.random.default_rng(6).normal(size=model.link_mass.shape))
        gradient = jax.grad(batch_loss)
        hvp = jax.jit(lambda m: jax.jvp(lambda x: gradient(x, states, tau), (m,), (direction,))[1])(model.link_mass)
        h = 1e-5
        at = jax.jit(lambda m: gradient(m, states, tau))
        difference = (at(model.link_mass + h * direction) - at(model.link_mass - h * direction)) / (2 * h)
        assert_close(hvp, difference, 1e-6, "Hessian-vector product")  # (central differences: h^2 error)


def test_rollout_kernel_nested_vmap():
    """vmap of vmap of a rollout: each outer index is a batch of its own."""
    model = random_model(5, 4, gravity=True)
    states = jax.tree.map(lambda *xs: jnp.stack(xs), *[random_state(model, 80 + k, scale=0.5) for k in range(6)])
    grid = jax.tree.map(lambda x: x.reshape((2, 3) + x.shape[1:]), states)
    ours = jax.jit(jax.vmap(jax.vmap(lambda s: sdjax.rollout(model, s, ROLLOUT_DT, ROLLOUT_STEPS).states.q)))(grid)
    expected = _per_sample_rollouts(model, states, None).states.q.reshape(ours.shape)
    assert_close(ours, expected, ROLLOUT_RTOL[jnp.float64], "nested vmap")


# ------------------------------------------------------------------------------------------
# Closed loop: a ControlScenario's law and every RK4 step in the kernel.

SCENARIO_STEPS = 20


def _scenario_batch(model, batch, seed, dtype):
    """A batch of sampled plants (link masses and inertias scaled) and scenario parameters:
    start, gains, set point, bias and noise torques, base loads."""
    rng = np.random.default_rng(seed)
    n = model.num_joints

    def draw(*shape, scale=1.0, mean=0.0):
        return jnp.asarray(mean + scale * rng.normal(size=(batch,) + shape), dtype)

    plants = sdjax.stack_models(
        [
            eqx.tree_at(
                lambda m: (m.link_mass, m.link_inertia),
                model,
                (model.link_mass * (1 + 0.2 * rng.uniform()), model.link_inertia * (1 + 0.2 * rng.uniform())),
            )
            for _ in range(batch)
        ]
    )
    params = {
        "q0": draw(n, scale=0.3),
        "qd0": draw(n, scale=0.2),
        "q_goal": draw(n, scale=0.5),
        "kp": jnp.abs(draw(n, mean=6.0)),
        "tau_bias": draw(n, scale=0.1),
        "tau_noise": draw(SCENARIO_STEPS, n, scale=0.3),
        "base_force": draw(3, scale=0.5),
        "base_torque": draw(3, scale=0.2),
    }
    return plants, params


def _per_sample_scenarios(scenario, plants, params):
    """Each sample without vmap: the XLA rollout of the scenario's law."""
    run = jax.jit(lambda plant, sample: scenario(plant, sample))
    out = [run(*jax.tree.map(lambda x: x[k], (plants, params))) for k in range(params["q0"].shape[0])]
    return jax.tree.map(lambda *xs: jnp.stack(xs), *out)


# Closed-loop tolerances: the law's torques differ from XLA's by the round-off of H*, C* (the
# kernel solves with H_b's Cholesky factor instead of forming H*), fed back for 20 steps
# (observed <= 2.2e-14 in float64, 1.5e-5 in float32 over the four configurations below, relative
# to the largest magnitude), with the rollouts' headroom (ROLLOUT_RTOL).
SCENARIO_RTOL = {jnp.float64: 1e-10, jnp.float32: 2e-3}


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
@pytest.mark.parametrize(
    "controller, base, seed",
    [
        ("pd", "floating", 23),
        ("computed_torque", "floating", 23),
        ("computed_torque", "floating", 5),
        ("pd", "planar", 11),
    ],
)
def test_scenario_kernel_equals_per_sample(controller, base, seed, dtype, monkeypatch):
    """A batch of ControlScenario samples (PD or computed torque with the nominal model, torque
    saturation, bias and noise torques, base loads, on sampled plants: branched trees with
    prismatic joints, gravity and passive joints; a chain-like and a bushy one (its forward
    dynamics by the sparse factorisation), a planar base) runs in one kernel call and equals
    each sample's rollout on the XLA path, states and the torques the law applied."""
    from sdjax.montecarlo import ControlScenario

    links = 12 if seed != 23 else 9
    model = random_model(seed, links, chain_probability=0.25 if seed == 5 else 0.7, gravity=True, passive=True)
    model = sdjax.edit_model(model, base=base).astype(dtype)
    sparse = len(batch_kernel._topology(model)[4]) > 0
    assert sparse == (seed != 23)  # (both factorisations are exercised)
    plants, params = _scenario_batch(model, 6, 3, dtype)
    scenario = ControlScenario(
        model, q_goal=jnp.zeros(links), kp=5.0, kd=3.0, dt=0.01, num_steps=SCENARIO_STEPS, controller=controller,
        torque_limit=2.0,
    )  # fmt: skip
    names = _counting_kernels(monkeypatch)
    ours = jax.jit(jax.vmap(lambda plant, sample: scenario(plant, sample)))(plants, params)
    assert names == ["rk4_rollout"], names
    expected = _per_sample_scenarios(scenario, plants, params)
    # The saturation is exercised: the law's torque (before bias and noise) at the limit.
    law = expected.controls.tau - params["tau_bias"][:, None] - params["tau_noise"]
    assert float(jnp.mean(jnp.isclose(jnp.abs(law), 2.0, rtol=1e-4))) > 0.05
    what = f"{controller} {base} seed {seed} {jnp.dtype(dtype).name}"
    for name in ("base_position", "base_quaternion", "base_linear_velocity", "base_angular_velocity", "q", "qd"):
        assert_close(
            getattr(ours.states, name), getattr(expected.states, name), SCENARIO_RTOL[dtype], f"{what}: {name}"
        )
    assert_close(ours.controls.tau, expected.controls.tau, SCENARIO_RTOL[dtype], f"{what}: applied torques")
    for a, b in zip(jax.tree.leaves((ours.time, ours.controls)), jax.tree.leaves((expected.time, expected.controls))):
        assert a.shape == b.shape and a.dtype == b.dtype
    assert_close(ours.controls.base_torque, expected.controls.base_torque, 1e-15, f"{what}: base loads")  # (copies)
    assert_close(ours.time, expected.time, 1e-15, f"{what}: time")  # (the same arange)


def test_scenario_kernel_shared_inputs_fallbacks_and_gradients(monkeypatch):
    """Shared plants and parameters (only the start batched) run in the kernel; a controller
    model the kernel does not take (planar base) runs on the XLA path with the same answer
    as each sample alone; derivatives (from the XLA rollout) equal per-sample ones."""
    from sdjax.montecarlo import ControlScenario

    model = random_model(7, 5, gravity=True)
    q0 = jnp.asarray(np.random.default_rng(0).normal(size=(4, 5)) * 0.3)
    scenario = ControlScenario(
        model, q_goal=jnp.ones(5), kp=4.0, kd=2.0, dt=0.02, num_steps=10, controller="computed_torque"
    )
    names = _counting_kernels(monkeypatch)
    ours = jax.jit(jax.vmap(lambda q: scenario(model, {"q0": q})))(q0)
    assert names == ["rk4_rollout"], names
    one = jax.jit(lambda q: scenario(model, {"q0": q}))  # (one program for every sample)
    expected = jax.tree.map(lambda *xs: jnp.stack(xs), *[one(q) for q in q0])
    assert_close(ours.states.q, expected.states.q, SCENARIO_RTOL[jnp.float64], "shared plant, batched start")
    assert_close(ours.controls.tau, expected.controls.tau, SCENARIO_RTOL[jnp.float64], "shared plant: torques")

    planar = ControlScenario(
        sdjax.edit_model(model, base="planar"), q_goal=jnp.ones(5), kp=4.0, kd=2.0, dt=0.02, num_steps=10,
        controller="computed_torque",
    )  # fmt: skip
    names.clear()
    jax.clear_caches()
    fallback = jax.jit(jax.vmap(lambda q: planar(model, {"q0": q})))(q0)
    assert names.count("rk4_rollout") == 10, names  # (each step apart, the law in XLA)
    alone = jax.jit(lambda q: planar(model, {"q0": q}))
    for k in range(q0.shape[0]):
        assert_close(fallback.states.q[k], alone(q0[k]).states.q, SCENARIO_RTOL[jnp.float64], f"planar controller {k}")

    # (PD: the cheapest law to differentiate; the derivative's route is the same for both laws)
    pd = ControlScenario(model, q_goal=jnp.ones(5), kp=4.0, kd=2.0, dt=0.02, num_steps=10, controller="pd")

    def loss(kp, q):
        return jnp.sum(pd(model, {"q0": q, "kp": kp}).states.q[-1] ** 2)

    kp = jnp.full((4, 5), 4.0)
    gradient = jax.jit(jax.vmap(jax.grad(loss)))(kp, q0)
    per_sample = jax.jit(jax.grad(loss))
    for k in range(q0.shape[0]):
        assert_close(gradient[k], per_sample(kp[k], q0[k]), 1e-9, f"gradient {k}")  # (10 steps' round-off)


def test_a_diverging_sample_gives_nan_not_an_error(monkeypatch):
    """A sample whose state cannot be evaluated (a zero base quaternion: division by zero) ends
    non-finite in the kernel as on the XLA path, and the others are unaffected (the kernel
    computes with IEEE arithmetic, as XLA does, rather than raising for the whole batch)."""
    model = random_model(9, 4)
    states = jax.tree.map(lambda *xs: jnp.stack(xs), *[random_state(model, 90 + k, scale=0.5) for k in range(3)])
    states = eqx.tree_at(lambda s: s.base_quaternion, states, states.base_quaternion.at[1].set(0.0))
    names = _counting_kernels(monkeypatch)
    ours = jax.jit(jax.vmap(lambda s: sdjax.rollout(model, s, ROLLOUT_DT, 5).states.qd))(states)
    assert names == ["rk4_rollout"], names
    expected = _per_sample_rollouts(model, states, None, steps=5).states.qd
    assert not np.all(np.isfinite(expected[1])) and not np.all(np.isfinite(ours[1]))
    assert_close(ours[::2], expected[::2], ROLLOUT_RTOL[jnp.float64], "the other samples")


# ------------------------------------------------------------------------------------------
# Reverse mode through the kernel: the vector-Jacobian product of the inverse dynamics.

# Tolerances of the kernel's reverse pass against JAX's reverse mode of the per-sample code:
# the same products summed in another order. Observed (assert_close's scale, the test's tree in
# the three base modes): 6e-14 in float64, 1.8e-4 in float32; float64's bound leaves three
# orders of magnitude, float32's is about ten times the largest observed.
VJP_RTOL = {jnp.float64: 1e-10, jnp.float32: 2e-3}


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
@pytest.mark.parametrize("base", ["floating", "planar", "fixed"])
def test_inverse_dynamics_vjp_kernel_equals_reverse_mode(base, dtype):
    """The kernel's cotangents of every input of the inverse dynamics (the model's masses,
    inertias, joint frames, lever arms, end-point offsets, passive coefficients and gravity; the
    base attitude and twist, joint positions and rates; the accelerations and end-point loads)
    equal ``jax.vjp`` of the per-sample XLA code, on branched trees with prismatic joints, for a
    shared model and for a batch of models; the leaves the inverse dynamics does not read
    (``base_position``, ``end_point_rpy``) get zero."""
    for seed, links in ((5, 12),):  # (three branches off the base, three prismatic joints)
        model = sdjax.edit_model(
            random_model(seed, links, chain_probability=0.4, gravity=True, passive=True), base=base
        ).astype(dtype)
        rng = np.random.default_rng(seed)
        models = sdjax.stack_models([jax.tree.map(lambda x: x * (1 + 0.2 * rng.uniform()), model) for _ in range(4)])
        motion = _motion_batch(model, 4, seed, dtype)
        cotangent = (
            jnp.asarray(rng.normal(size=(4, 6)), dtype),
            jnp.asarray(rng.normal(size=(4, model.num_joints)), dtype),
        )

        def reverse_mode(m, *sample):
            *inputs, bar = sample
            return jax.vjp(dynamics._newton_euler_inverse, m, *inputs)[1](bar)

        for models_batched, m in ((False, model), (True, models)):
            flags = (jax.tree.map(lambda _: models_batched, m), *[jax.tree.map(lambda _: True, x) for x in motion])
            ours = jax.jit(lambda m, *a: batch_kernel.inverse_dynamics_vjp(4, m, *a[:-1], a[-1], flags))(
                m, *motion, cotangent
            )
            expected = jax.jit(jax.vmap(reverse_mode, in_axes=(0 if models_batched else None, 0, 0, 0, 0, 0, 0)))(
                m, *motion, cotangent
            )
            paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(expected)[0]]
            for path, a, b in zip(paths, jax.tree.leaves(ours), jax.tree.leaves(expected)):
                assert_close(a, b, VJP_RTOL[dtype], f"cotangent {path}, models batched: {models_batched}")
            assert float(jnp.max(jnp.abs(ours[1].q))) > 0.1  # (cotangents of order 1, not all zero)


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
@pytest.mark.parametrize("base", ["floating", "planar", "fixed"])
def test_forward_dynamics_reverse_mode_kernel_equals_xla_path(base, dtype, monkeypatch):
    """The kernel's reverse mode of the forward dynamics (the multiplier ``H^-1 a_bar`` and the
    inverse dynamics' vector-Jacobian product) gives the gradients of the XLA path
    (``SDJAX_KERNEL=jax``: JAX's transpose of the implicit-function rule) with respect to every
    leaf of the model, the states and the controls, on a branched tree with prismatic joints,
    end-point and base loads, passive joints and gravity, in each base mode, for a shared model
    (its gradient summed over the batch) and for a batch of models."""
    kernels = _counting_kernels(monkeypatch)
    model = sdjax.edit_model(random_model(13, 9, chain_probability=0.4, gravity=True, passive=True), base=base).astype(
        dtype
    )
    rng = np.random.default_rng(4)
    models = sdjax.stack_models([jax.tree.map(lambda x: x * (1 + 0.2 * rng.uniform()), model) for _ in range(5)])
    states, controls = _batch(model, 5, 6, dtype)
    weights = jnp.asarray(rng.normal(size=(5, 6 + model.num_joints)), dtype)

    def loss(m, s, c, model_axis):
        fd = jax.vmap(dynamics.floating_acceleration, in_axes=(model_axis, 0, 0))
        return jnp.sum(jnp.sin(fd(m, s, c)) * weights)

    def gradients():
        shared = jax.jit(jax.grad(loss, argnums=(0, 1, 2)), static_argnums=3)(model, states, controls, None)
        batched = jax.jit(jax.grad(loss, argnums=(0, 1, 2)), static_argnums=3)(models, states, controls, 0)
        return shared, batched

    ours = gradients()
    assert kernels.count("forward_dynamics_vjp_range") == 2
    monkeypatch.setenv("SDJAX_KERNEL", "jax")
    jax.clear_caches()
    expected = gradients()
    for what, a, b in zip(("shared model", "batch of models"), ours, expected):
        paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(b)[0]]
        for path, x, y in zip(paths, jax.tree.leaves(a), jax.tree.leaves(b)):
            # (Round-off of the factor's solve and the reverse pass's sums; float32: RTOL's
            # bound, a solve with H's condition number.)
            assert_close(x, y, RTOL[dtype], f"{what}: gradient {path}")


def test_gradients_through_the_kernel_equal_the_xla_path(monkeypatch):
    """Reverse mode of batched forward and inverse dynamics passes through the kernel's
    vector-Jacobian product (counted), and gradients with respect to the model (shared: summed
    over the batch), the states and the controls equal those of the XLA path (``SDJAX_KERNEL=jax``),
    with ``grad`` outside and inside ``vmap``; second derivatives (forward over reverse) too."""
    kernels = _counting_kernels(monkeypatch)
    model = random_model(8, 7, gravity=True, passive=True)
    states, controls = _batch(model, 6, 2, jnp.float64)
    weights = jnp.asarray(np.random.default_rng(3).normal(size=(6, 6 + model.num_joints)))

    def loss(m, s, c):
        accelerations = jax.vmap(lambda s, c: dynamics.floating_acceleration(m, s, c))(s, c)
        tau = jax.vmap(lambda s, a: sdjax.inverse_dynamics(m, s, a[:6], a[6:])[1])(s, weights)
        return jnp.sum(jnp.sin(accelerations) * weights) + jnp.sum(jnp.cos(tau))

    def per_sample_loss(m, s, c, w):
        return jnp.sum(jnp.sin(dynamics.floating_acceleration(m, s, c)) * w) + jnp.sum(
            jnp.cos(sdjax.inverse_dynamics(m, s, w[:6], w[6:])[1])
        )

    def runs():
        outside = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(model, states, controls)
        inside = jax.jit(jax.vmap(jax.grad(per_sample_loss, argnums=(1, 2)), in_axes=(None, 0, 0, 0)))(
            model, states, controls, weights
        )
        # Forward over reverse: the gradient's derivative along a direction of the joint rates.
        direction = jnp.ones_like(states.qd)
        second = jax.jit(
            lambda qd: jax.jvp(
                lambda x: jax.grad(loss, argnums=1)(model, eqx.tree_at(lambda s: s.qd, states, x), controls).q,
                (qd,),
                (direction,),
            )[1]
        )(states.qd)
        return outside, inside, second

    ours = runs()
    assert "forward_dynamics_vjp_range" in kernels and "inverse_dynamics_vjp_range" in kernels
    monkeypatch.setenv("SDJAX_KERNEL", "jax")
    jax.clear_caches()
    expected = runs()
    for what, a, b in zip(("grad outside vmap", "grad inside vmap", "forward over reverse"), ours, expected):
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
            assert_close(x, y, 1e-10, what)  # (round-off of the solves and the reverse pass's sums, as VJP_RTOL)


def test_rule_factor_derivative_with_and_without_a_tangent_of_the_factor():
    """The factor the forward dynamics' rule reads (``dynamics.rule_factor``) differentiates as the
    Cholesky factor of ``H``: with the solve's factor, whose tangent it passes on (no ``H``
    recomputed: a second derivative on the XLA path compiles the program it compiled before
    the kernel's refactorisation existed), and with a factor that carries no tangent while the
    state does, which it refactorises. Both against NumPy's Cholesky factor of ``H`` and its
    central difference along the direction."""
    model = random_model(31, 6, chain_probability=0.5, gravity=True)  # (floating base: H is all free)
    state = random_state(model, 3)
    direction = np.random.default_rng(4).normal(size=model.num_joints)

    def at(q):
        return eqx.tree_at(lambda s: s.q, state, q)

    def numpy_factor(q):
        return np.linalg.cholesky(np.asarray(sdjax.inertia_matrix(model, at(jnp.asarray(q)))))

    step, q0 = 1e-5, np.asarray(state.q)
    expected_value = numpy_factor(q0)
    expected_tangent = (numpy_factor(q0 + step * direction) - numpy_factor(q0 - step * direction)) / (2 * step)
    fixed = dynamics._inertia_factor(model, state)  # (no tangent: computed outside the jvp)
    for name, factor_of in [("solve's factor", lambda q: dynamics._inertia_factor(model, at(q))), ("fixed", None)]:
        value, tangent = jax.jvp(
            lambda q: dynamics.rule_factor(model, at(q), fixed if factor_of is None else factor_of(q)),
            (state.q,),
            (jnp.asarray(direction),),
        )
        assert_close(value, expected_value, 1e-12, f"{name}: value")  # (two LAPACK factorisations: round-off)
        # central difference: truncation ~ step^2 times the third derivative (~1e-10), round-off
        # ~ eps |L| / step (~1e-11)
        assert_close(tangent, expected_tangent, 1e-8, f"{name}: tangent")


@pytest.mark.parametrize(
    ("base", "dtype"), [("floating", jnp.float64), ("fixed", jnp.float64), ("floating", jnp.float32)]
)
def test_refactorised_inertia_matrix_in_forward_and_reverse_mode(base, dtype, monkeypatch):
    """The derivative rule of a batch the kernel solves keeps no factor: reverse mode
    refactorises ``H`` inside the kernel's vector-Jacobian product (by the sparse factorisation
    on a bushy tree, checked), forward mode through the inertia kernel's factor (counted).
    Both equal the XLA path (``SDJAX_KERNEL=jax``, which keeps the solve's own factor) on a
    12-link branched tree with prismatic joints, gravity, passive joints and loads, with
    respect to the model's masses and inertias, the states and the torques."""
    kernels = _counting_kernels(monkeypatch)
    model = sdjax.edit_model(random_model(5, 12, chain_probability=0.25, gravity=True, passive=True), base=base)
    model = model.astype(dtype)
    assert len(batch_kernel._topology(model)[4]) == model.num_velocities  # (the sparse factorisation)
    states, controls = _batch(model, 6, 8, dtype)
    weights = jnp.asarray(np.random.default_rng(5).normal(size=(6, 6 + model.num_joints)), dtype)
    rng = np.random.default_rng(6)
    inertia_direction = jnp.asarray(rng.normal(size=model.link_inertia.shape), dtype)
    inertia_direction = inertia_direction + jnp.swapaxes(inertia_direction, -1, -2)
    mass_direction = jnp.asarray(rng.normal(size=model.link_mass.shape), dtype)
    directions = (mass_direction, inertia_direction, jnp.ones_like(states.qd))

    def loss(masses, inertias, s, c):
        m = eqx.tree_at(lambda m: (m.link_mass, m.link_inertia), model, (masses, inertias))
        accelerations = jax.vmap(lambda s, c: dynamics.floating_acceleration(m, s, c))(s, c)
        return jnp.sum(jnp.sin(accelerations) * weights)

    def runs():
        reverse = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))(model.link_mass, model.link_inertia, states, controls)
        forward = jax.jit(
            lambda masses, inertias, qd: jax.jvp(
                lambda a, b, x: loss(a, b, eqx.tree_at(lambda s: s.qd, states, x), controls),
                (masses, inertias, qd),
                directions,
            )[1]
        )(model.link_mass, model.link_inertia, states.qd)
        return reverse, forward

    ours = runs()
    # (The loss reads no inertia matrix: the inertia kernel ran for forward mode's factor.)
    assert "forward_dynamics_vjp_range" in kernels and "inertia_matrix_range" in kernels
    monkeypatch.setenv("SDJAX_KERNEL", "jax")
    jax.clear_caches()
    expected = runs()
    for what, a, b in zip(("reverse mode", "forward mode"), ours, expected):
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
            assert x.dtype == dtype
            assert_close(x, y, RTOL[dtype], f"{base}: {what}")  # (round-off of two factorisations)


@pytest.mark.parametrize(
    ("base", "dtype"), [("floating", jnp.float64), ("fixed", jnp.float64), ("floating", jnp.float32)]
)
def test_rk4_step_in_the_kernel_forward_and_reverse_mode(base, dtype, monkeypatch):
    """A batch of RK4 steps under a feedback law (the closed loop a JAX law makes: XLA between
    steps) steps in the kernel, one call per step, and its reverse mode is one call per step too
    (the four stages transposed, counted). Values, reverse mode (masses, inertias, joint offsets,
    gravity, initial states, the law's gain and the step) and forward mode equal the XLA path
    (``SDJAX_KERNEL=jax``, the plain step's tangent at its stages) on a 9-link branched tree
    with prismatic joints, passive joints, gravity and base and end-point loads."""
    kernels = _counting_kernels(monkeypatch)
    model = sdjax.edit_model(random_model(21, 9, chain_probability=0.4, gravity=True, passive=True), base=base)
    model = model.astype(dtype)
    assert not all(t == "R" for t in model.joint_type) and len(set(model.parent)) < model.num_joints
    batch, steps, n, ne = 5, 3, model.num_joints, model.num_end_points
    states = jax.tree.map(
        lambda *xs: jnp.stack(xs).astype(dtype), *[random_state(model, 40 + k, scale=0.5) for k in range(batch)]
    )
    rng = np.random.default_rng(9)
    loads = dynamics.Controls(
        jnp.zeros((n,), dtype),
        jnp.asarray(rng.normal(size=3), dtype),
        jnp.asarray(rng.normal(size=3), dtype),
        jnp.asarray(rng.normal(size=(ne, 3)), dtype),
        jnp.asarray(rng.normal(size=(ne, 3)), dtype),
    )
    weights = jnp.asarray(rng.normal(size=(batch, 13 + 2 * n)), dtype)

    def loss(masses, inertias, offsets, gravity, gain, dt, s):
        m = eqx.tree_at(
            lambda m: (m.link_mass, m.link_inertia, m.parent_centroid_to_joint, m.gravity),
            model,
            (masses, inertias, offsets, gravity),
        )

        def law(t, state):
            return eqx.tree_at(lambda c: c.tau, loads, -gain * state.q - 0.3 * state.qd + jnp.sin(t))

        def one(state):
            end = jax.tree.map(lambda x: x[-1], sdjax.rollout(m, state, dt, steps, law).states)
            return jnp.concatenate([end.base_position, end.base_quaternion, end.base_linear_velocity])

        ends = jax.vmap(one)(s)
        final = jax.vmap(lambda state: sdjax.rk4_step(m, state, dt, loads))(s)
        return jnp.sum(jnp.sin(ends) * weights[:, :10]) + jnp.sum(jnp.cos(final.q) * weights[:, 10 : 10 + n])

    primals = (
        model.link_mass,
        model.link_inertia,
        model.parent_centroid_to_joint,
        model.gravity,
        jnp.asarray(2.0, dtype),
        jnp.asarray(0.01, dtype),
        states,
    )
    directions = jax.tree.map(lambda x: jnp.asarray(rng.normal(size=np.shape(x)), dtype), primals)

    def runs():
        value = jax.jit(loss)(*primals)
        reverse = jax.jit(jax.grad(loss, argnums=tuple(range(7))))(*primals)
        forward = jax.jit(lambda *p: jax.jvp(loss, p, directions)[1])(*primals)
        return value, reverse, forward

    ours = runs()
    assert kernels.count("rk4_step_vjp_range") == steps + 1 and "forward_dynamics_vjp_range" not in kernels
    assert kernels.count("rk4_rollout") >= 2 * (steps + 1)  # (the value and the gradient's forward pass)
    monkeypatch.setenv("SDJAX_KERNEL", "jax")
    jax.clear_caches()
    expected = runs()
    for what, a, b in zip(("value", "reverse mode", "forward mode"), ours, expected):
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
            assert x.dtype == dtype
            assert_close(x, y, RTOL[dtype], f"{base}: {what}")  # (round-off of 4 (steps + 1) solves)


def test_second_derivatives_of_batched_rollouts_equal_the_xla_path(monkeypatch):
    """Hessian-vector products (forward over reverse) of batched rollouts served by the kernel
    equal the XLA path's (``SDJAX_KERNEL=jax``), on branched trees with prismatic and passive
    joints: open loop (the rollout kernel) under two ``vmap``s on a floating base, closed loop
    (the RK4 step kernel, its reverse, and the factor the step's rule refactorises from ``H``)
    on a planar base. (JAX inlines a rule's primal function when it linearizes, so the second
    derivative meets the kernel's custom call.) One program for both, each mode its own:
    reverse over reverse takes the same rules (checked apart, not here: its programs doubled
    this test's 3-minute compile)."""
    floating = random_model(31, 6, chain_probability=0.4, gravity=True, passive=True)
    planar = sdjax.edit_model(floating, base="planar")
    assert not all(t == "R" for t in floating.joint_type) and len(set(floating.parent)) < floating.num_joints
    states, controls = _batch(floating, 6, 7, jnp.float64)
    planar_states = _batch(planar, 6, 8, jnp.float64)[0]
    held = jnp.stack([controls.tau, -0.5 * controls.tau], axis=1)  # (2 steps per sample)
    grid = jax.tree.map(lambda x: x.reshape((2, 3) + x.shape[1:]), states)

    def loss(tau):
        def open_loop(s, c):
            return sdjax.rollout(floating, s, 0.01, 2, c).states.q[-1]

        def closed_loop(s, c):
            law = lambda t, x: -c * x.q - 0.3 * x.qd  # noqa: E731
            return sdjax.rollout(planar, s, 0.01, 2, law).states.qd[-1]

        nested = jax.vmap(jax.vmap(open_loop))(grid, tau.reshape((2, 3) + tau.shape[1:]))
        return jnp.sum(jnp.sin(nested)) + jnp.sum(jnp.cos(jax.vmap(closed_loop)(planar_states, tau[:, 0])))

    direction = jnp.asarray(np.random.default_rng(5).normal(size=held.shape))

    def hessian_times_direction():
        return jax.jit(lambda t: jax.jvp(jax.grad(loss), (t,), (direction,))[1])(held)

    ours = hessian_times_direction()
    monkeypatch.setenv("SDJAX_KERNEL", "jax")
    jax.clear_caches()
    expected = hessian_times_direction()
    assert float(jnp.max(jnp.abs(expected))) > 1e-3  # (a real second derivative)
    assert_close(ours, expected, 1e-10, "forward over reverse")  # (round-off of the solves and sums, as VJP_RTOL)
