"""Compiled CPU kernels for batched dynamics (optional: ``pip install sdjax[fast]``).

Under ``jax.vmap`` the per-sample code of :mod:`sdjax.dynamics` runs as XLA kernels with the
batch as the outermost axis: every product of 3-vectors works on axes of length 3, each of the
~60 fusions of a forward dynamics is a separate pass over memory, and the Cholesky solve of the
inertia matrix is one LAPACK call per sample. Rewriting the equations with the batch innermost
inside XLA was measured and does not help on the CPU: XLA's CPU fusion recomputes shared
producers in every consumer (a 7-link chain unrolled link by link compiled to 45k multiplies
for ~5k in the equations, 3x slower than ``vmap``), and the same code as a ``lax.scan`` over
links ran 2.5x slower (benchmarks/README.md, "The compiled batch kernel").

This module evaluates the same equations, sample by sample, as one function compiled by
Numba (LLVM), called by XLA as a custom call through its FFI (:mod:`sdjax._kernel_ffi`: the
buffers in place, chunks of the batch on XLA's thread pool; ``jax.pure_callback`` where jaxlib
has no FFI) and run on all cores: kinematics and the Newton-Euler bias forces (seed 000 eqs
3.1-3.39), the composite-body inertia matrix from subtree mass moments (eqs 3.18-3.28, as
:func:`sdjax.dynamics.inertia_matrix_from_frames`), its Cholesky factorisation and eq 3.29's
solve, with every intermediate in registers or a scratch block per call. It is entered by
the batching rule of the forward dynamics (:func:`sdjax.dynamics.forward_dynamics` and
everything built on it: rollouts, Monte-Carlo), and of :func:`sdjax.inverse_dynamics`,
:func:`sdjax.bias_forces` and :func:`sdjax.inertia_matrix` (the same pieces:
:func:`inverse_dynamics`, :func:`inertia_matrix`), on the CPU backend when Numba is installed; the
JAX path stays the reference and runs everywhere else (GPU, no Numba, ``SDJAX_KERNEL=jax``).

Reverse mode of a batch passes through here too: the vector-Jacobian product of the
Newton-Euler inverse dynamics (:func:`inverse_dynamics_vjp`: every piece of its forward pass
transposed by hand, eqs 3.1-3.39), and that of the forward dynamics by its implicit-function
rule (:func:`forward_dynamics_vjp`: the multiplier ``H^-1 a_bar``, ``H`` refactorised per
sample rather than stored by the forward pass, then the same product), entered through the
linear primitive of
:func:`sdjax._derivatives.linearized_tangent`. An RK4 step with held loads is one piece both
ways: :func:`rk4_step` (the step, and the four stages reverse mode reads) and
:func:`rk4_step_vjp` (the four stages transposed, each stage's forward dynamics as above), so a
rollout under a JAX feedback law crosses from XLA once per step and once per step back. Forward mode and higher derivatives are the JAX
path's. Values and cotangents agree with the JAX path to round-off (tests/test_batch_kernel.py).
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import threading
from typing import Any, Callable, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from sdjax.rotation import rpy_to_matrix

#: Environment variable choosing the batched forward-dynamics path: ``auto`` (default: the
#: compiled kernel when Numba is installed and the backend is the CPU) or ``jax``.
KERNEL_ENV = "SDJAX_KERNEL"

#: Smallest batch given to the kernel (forward and inverse dynamics, ``H``, an RK4 step): from
#: here it is ahead of the XLA path by 2-5x (2026-11-29, 2-core AMD EPYC, float64, through
#: XLA's FFI: the 7-joint arm's forward dynamics 3.0x at batch 16, 4.0x at 64, its inverse
#: dynamics and ``H`` 2.2x and 2.6x at 16, a 30-link tree's forward dynamics 4.9x at 16; 1.3-3.6x
#: at batches of 4 and 8, less steadily). Through ``jax.pure_callback`` each call cost 0.3-0.9 ms
#: more, and the threshold was 128 samples (and 2048 bodies for inverse dynamics and ``H``).
MIN_BATCH = 16


@functools.cache
def _numba() -> Any:
    try:
        import numba
    except ImportError:
        return None
    return numba


def available() -> bool:
    """Whether batched dynamics will use the compiled kernel (Numba installed, CPU
    backend, not disabled by ``SDJAX_KERNEL=jax``)."""
    choice = os.environ.get(KERNEL_ENV, "auto").lower()
    if choice not in ("auto", "jax"):
        raise ValueError(f"{KERNEL_ENV}={choice!r}: choose 'auto' or 'jax'")
    return choice == "auto" and _numba() is not None and jax.default_backend() == "cpu"


@functools.cache
def _equations() -> Any:
    """:mod:`sdjax._kernel_equations` (imports Numba; compiled on first call, cached on disk).

    The kernels are serial and release the GIL: threads of this process take disjoint sample
    ranges (a parallel Numba loop compiled 3x longer, 13 s, and its OpenMP threads spun
    between calls, slowing XLA's own threads)."""
    from sdjax import _kernel_equations

    return _kernel_equations


@functools.cache
def _threads() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(
        max_workers=max(1, _thread_count() - 1), thread_name_prefix="sdjax-kernel"
    )


def _thread_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # (not on every platform)
        return max(1, os.cpu_count() or 1)


# ------------------------------------------------------------------------------------------
# Entry from JAX.


def _model_leaves(model: Any) -> list[Any]:
    """The model's inputs of the kernels, in their argument order."""
    return [
        model.base_mass,
        model.base_inertia,
        model.link_mass,
        model.link_inertia,
        model.joint_rpy,
        model.parent_centroid_to_joint,
        model.centroid_to_joint,
        model.centroid_to_end_point,
        model.joint_stiffness,
        model.joint_damping,
        model.gravity,
    ]


def _controls_leaves(controls: Any) -> list[Any]:
    return [
        controls.tau,
        controls.base_force,
        controls.base_torque,
        controls.end_point_force,
        controls.end_point_torque,
    ]


def _topology(model: Any) -> tuple[np.ndarray, ...]:
    """``parent``, ``revolute``, ``free`` (the base mode's free coordinates), ``end_point_link``
    and ``dof_parent``: the static arguments of the kernels.

    ``dof_parent[r]``: the free coordinate that coordinate ``r`` hangs from in the tree (-1 at
    the root): the free base components form a chain, each joint hangs from its parent link's
    joint or, on the base, from the last free base component (models with mimic joints never
    reach the kernels). The kernels' sparse factorisation of ``H`` follows it; it is given only
    where it needs at most half the multiplications of the dense Cholesky factorisation (a
    branched tree), and is empty otherwise: on a chain both do the same work and the dense
    loops ran 15 % faster (7-joint arm), on a 30-link tree 9 links deep the sparse one 1.25x."""
    n = model.num_joints
    nb = model.num_base_velocities
    dof_parent = [r - 1 for r in range(nb)] + [
        (nb - 1 if model.parent[i] == 0 else nb + model.parent[i] - 1) for i in range(n)
    ]
    depth = [0] * (nb + n)
    for r, p in enumerate(dof_parent):  # (parents come first)
        depth[r] = 1 + (depth[p] if p >= 0 else 0)
    sparse_work, dense_work = sum(d * d for d in depth) / 2, (nb + n) ** 3 / 6
    return (
        np.asarray(model.parent, np.int64).reshape(n),
        np.asarray([t == "R" for t in model.joint_type], np.bool_).reshape(n),
        np.asarray(model.velocity_indices, np.int64),
        np.asarray(model.end_point_link, np.int64).reshape(model.num_end_points),
        np.asarray(dof_parent if sparse_work <= dense_work / 2 else [], np.int64),
    )


#: The kernels of :mod:`sdjax._kernel_equations` that XLA calls (each compiled by Numba once per
#: precision on first use and cached on disk; ``sdjax kernels`` compiles them all ahead).
ENTRY_KERNELS = (
    "forward_dynamics",
    "forward_dynamics_vjp_range",
    "inverse_dynamics_range",
    "inverse_dynamics_vjp_range",
    "inertia_matrix_range",
    "rk4_rollout",
    "rk4_step_vjp_range",
)


def kernels_called() -> set[tuple[str, str]]:
    """The entry kernels this process has built a call of, as ``(name, precision)`` pairs
    (``precision``: ``"float64"`` or ``"float32"``). Once a program holding the call has run,
    the kernel is compiled (or loaded from the disk cache): an FFI entry when the call is traced,
    a callback's kernel on its first run."""
    return set(_called)


_called: set[tuple[str, str]] = set()


def _call(
    kernel_name: str,
    axis_size: int,
    topology: tuple,
    leaves: list[Any],
    is_batched: list[bool],
    dtype: Any,
    results: list[jax.ShapeDtypeStruct],
    outputs: tuple[int | tuple[int, ...], ...] | None = None,
) -> list[Array]:
    """Runs the kernel ``kernel_name`` of :mod:`sdjax._kernel_equations` on a batch of
    ``axis_size`` samples: ``kernel(*topology, *leaves, *outputs, start, stop)``.

    ``topology``: the static arguments (arrays, or an int passed by value); ``leaves``: the
    kernel's array inputs in argument order, each batched (batch on axis 0) or shared, as
    ``is_batched`` says, handed to the kernel with a leading axis of ``B`` or 1. ``results``:
    the outputs returned (batch axis first); ``outputs``: the kernel's output arguments, each
    the index of a result or the shape of an empty array it leaves alone (default: the
    results in order).

    The call is an XLA FFI custom call (:mod:`sdjax._kernel_ffi`: buffers read and written in
    place, the chunks on XLA's thread pool) or, where this jaxlib lacks the FFI or with
    ``SDJAX_KERNEL_CALL=callback``, a ``jax.pure_callback`` (:func:`_call_back`)."""
    assert kernel_name in ENTRY_KERNELS, kernel_name
    _called.add((kernel_name, np.dtype(dtype).name))
    values = [jnp.asarray(x, dtype) for x in leaves]
    plan = tuple(range(len(results))) if outputs is None else outputs
    if not any(is_batched):  # (only leaves the kernel does not read vary, e.g. base_position)
        values[0], is_batched = jnp.broadcast_to(values[0], (axis_size,) + values[0].shape), [True, *is_batched[1:]]
    if not _ffi_call():
        return _call_back(kernel_name, axis_size, topology, values, is_batched, dtype, results, plan)
    # (integer topology as int32: JAX holds int64 only in 64-bit mode; widened in the handler)
    operands = [jnp.asarray(t, jnp.bool_ if np.asarray(t).dtype == np.bool_ else jnp.int32) for t in topology]
    operands += [v if b else v[None] for v, b in zip(values, is_batched)]
    empty = [jnp.zeros(shape, dtype) for shape in plan if isinstance(shape, tuple)]
    arguments = [_ffi().Argument("operand", k, _element(x.dtype), x.ndim) for k, x in enumerate(operands)]
    for output in plan:
        if isinstance(output, tuple):
            arguments.append(_ffi().Argument("operand", len(operands), _element(np.dtype(dtype)), len(output)))
            operands.append(empty.pop(0))
        else:
            arguments.append(_ffi().Argument("result", output, _element(np.dtype(dtype)), len(results[output].shape)))
    name = _ffi().target(kernel_name, tuple(arguments))
    call = jax.ffi.ffi_call(name, results, vmap_method="sequential")
    return list(call(*operands, smallest=np.int64(_smallest_range(kernel_name))))


def _element(dtype: Any) -> str:
    return "bool" if dtype == np.bool_ else np.dtype(dtype).name


#: Environment variable choosing how XLA calls the kernels: ``ffi`` (default where jaxlib has
#: XLA's FFI: :mod:`sdjax._kernel_ffi`) or ``callback`` (``jax.pure_callback``, measured ~0.25
#: ms more per call at batch 1024, 7-joint arm).
CALL_ENV = "SDJAX_KERNEL_CALL"


def _ffi_call() -> bool:
    choice = os.environ.get(CALL_ENV, "ffi").lower()
    if choice not in ("ffi", "callback"):
        raise ValueError(f"{CALL_ENV}={choice!r}: choose 'ffi' or 'callback'")
    return choice == "ffi" and _ffi().available()


@functools.cache
def _ffi() -> Any:
    """:mod:`sdjax._kernel_ffi` (imports Numba)."""
    from sdjax import _kernel_ffi

    return _kernel_ffi


def _call_back(
    kernel_name: str,
    axis_size: int,
    topology: tuple,
    values: list[Array],
    is_batched: list[bool],
    dtype: Any,
    results: list[jax.ShapeDtypeStruct],
    plan: tuple[int | tuple[int, ...], ...],
) -> list[Array]:
    """:func:`_call` through one ``jax.pure_callback``. The inputs are passed packed into one
    array of batched and one of shared numbers (each array a callback passes costs ~30 us,
    measured, whatever its size); the results come back one array each, so that the kernel's
    output arguments are contiguous arrays as on the FFI path (one Numba compilation of each
    kernel serves both)."""
    # Leaf by leaf (each leaf's numbers contiguous, batch first), so that the kernel's arrays are
    # views of one writable copy of each packed array: no copy per leaf on the host.
    layout, batched_end, shared_end = [], 0, 0
    for v, b in zip(values, is_batched):
        if b:
            layout.append((True, batched_end, batched_end + v.size, v.shape))
            batched_end += v.size
        else:
            layout.append((False, shared_end, shared_end + v.size, (1,) + v.shape))
            shared_end += v.size
    packed_batched = jnp.concatenate([v.reshape(-1) for v, b in zip(values, is_batched) if b])
    shared = [v.reshape(-1) for v, b in zip(values, is_batched) if not b]
    packed_shared = jnp.concatenate(shared) if shared else jnp.zeros((0,), dtype)

    def host(batched_numbers: np.ndarray, shared_numbers: np.ndarray) -> list[np.ndarray]:
        # Under further vmaps (vmap_method="broadcast_all") both carry the same extra leading
        # axes: each outer index is a separate batch of B. One copy of each: contiguous and
        # writable (Numba compiles one kernel per array type, and XLA's buffers are read-only).
        outer = np.shape(batched_numbers)[:-1]
        count = int(np.prod(outer, dtype=np.int64))
        batched_numbers = np.array(batched_numbers).reshape(count, batched_end)
        shared_numbers = np.array(np.broadcast_to(shared_numbers, outer + (shared_end,))).reshape(count, shared_end)
        buffers = [np.empty((count,) + r.shape, r.dtype) for r in results]
        for k in range(count):
            arrays = [
                (batched_numbers if b else shared_numbers)[k, start:stop].reshape(shape)
                for b, start, stop, shape in layout
            ]
            kernel_outputs = tuple(np.empty(o, dtype) if isinstance(o, tuple) else buffers[o][k] for o in plan)
            _run(getattr(_equations(), kernel_name), axis_size, topology, arrays, kernel_outputs)
        return [b.reshape(outer + b.shape[1:]) for b in buffers]

    return jax.pure_callback(host, results, packed_batched, packed_shared, vmap_method="broadcast_all")


def _flags(tree: Any, batched: Any) -> dict[int, bool]:
    return dict(zip(map(id, jax.tree.leaves(tree)), jax.tree.leaves(batched)))


def _dtype(model: Any, state: Any) -> Any:
    return jnp.result_type(model.joint_rpy, state.q, state.base_quaternion)


def _sample_leaves(model: Any, state: Any, dtype: Any, flags: dict[int, bool]) -> list[Any]:
    """The state's (base quaternion and twist, ``q``, ``qd``) and the model's inputs of the
    kernels of :func:`sdjax._kernel_equations.forward_dynamics_range`'s signature, in their
    argument order. The fixed rotation ``Rx Ry Rz`` of each joint frame replaces its RPY angles
    (computed once per model, not per sample, when the model is shared), with their flag."""
    rotation = rpy_to_matrix(jnp.asarray(model.joint_rpy, dtype))
    flags[id(rotation)] = flags[id(model.joint_rpy)]
    leaves = [
        state.base_quaternion,
        state.base_linear_velocity,
        state.base_angular_velocity,
        state.q,
        state.qd,
        *_model_leaves(model),
    ]
    leaves[9] = rotation  # (in place of model.joint_rpy)
    return leaves


def _held_loads(loads: list[Any], flags: dict[int, bool]) -> list[Any]:
    """Loads in the kernels' layout: a step axis (of one: held) after any batch axis; each new
    array takes the flag of the one it replaces."""
    held = [jnp.expand_dims(x, 1 if flags[id(x)] else 0) for x in loads]
    for old, new in zip(loads, held):
        flags[id(new)] = flags[id(old)]
    return held


def solve_forward_dynamics(
    axis_size: int, model: Any, state: Any, controls: Any, batched: Any, *, with_factor: bool
) -> tuple[Array, Array | None]:
    """Batched :func:`sdjax.dynamics._solve_forward_dynamics` by the compiled kernel.

    Arguments:
        axis_size: batch size ``B``.
        model, state, controls: :class:`~sdjax.model.Model`, :class:`~sdjax.state.State`,
            :class:`~sdjax.dynamics.Controls`; each leaf either batched (batch on axis 0) or
            shared by the batch, as ``batched`` (the same pytree structure, booleans) says.
        with_factor: also return the Cholesky factor (a ``(B, nv, nv)`` array to copy back:
            asked for only where it is used).

    Returns:
        ``(acceleration (B, 6 + n), factor (B, nv, nv) or None)`` as the per-sample function
        returns them: floating-order accelerations ``[dv0/dt, dw0/dt, qdd]`` and the lower
        Cholesky factor of the free coordinates' inertia matrix.
    """
    dtype = _dtype(model, state)
    flags = _flags((model, state, controls), batched)
    leaves = [*_sample_leaves(model, state, dtype, flags), *_held_loads(_controls_leaves(controls), flags)]
    is_batched = [bool(flags[id(x)]) for x in leaves]
    n, nv = model.num_joints, model.num_velocities
    results = [jax.ShapeDtypeStruct((axis_size, 6 + n), dtype)]
    if with_factor:
        results.append(jax.ShapeDtypeStruct((axis_size, nv, nv), dtype))

    outputs = (0, 1 if with_factor else (0, nv, nv))  # (a factor not asked for: not stored)
    out = _call("forward_dynamics", axis_size, _topology(model), leaves, is_batched, dtype, results, outputs)
    return out[0], (out[1] if with_factor else None)


def inverse_dynamics(
    axis_size: int,
    model: Any,
    state: Any,
    base_acceleration: Any,
    qdd: Any,
    end_point_force: Any,
    end_point_torque: Any,
    batched: Any,
) -> tuple[Array, Array]:
    """Batched :func:`sdjax.inverse_dynamics` of checked inputs (a model without mimic joints)
    by the compiled kernel: ``(base_wrench (B, 6), tau (B, n))``, the per-sample function's
    outputs. ``batched``: booleans, the structure of ``(model, state, base_acceleration, qdd,
    end_point_force, end_point_torque)``."""
    dtype = _dtype(model, state)
    flags = _flags((model, state, base_acceleration, qdd, end_point_force, end_point_torque), batched)
    leaves = [
        *_sample_leaves(model, state, dtype, flags),
        base_acceleration,
        qdd,
        *_held_loads([end_point_force, end_point_torque], flags),
    ]
    results = [
        jax.ShapeDtypeStruct((axis_size, 6), dtype),
        jax.ShapeDtypeStruct((axis_size, model.num_joints), dtype),
    ]
    is_batched = [bool(flags[id(x)]) for x in leaves]
    out = _call("inverse_dynamics_range", axis_size, _topology(model), leaves, is_batched, dtype, results)
    return out[0], out[1]


def inverse_dynamics_vjp(
    axis_size: int,
    model: Any,
    state: Any,
    base_acceleration: Any,
    qdd: Any,
    end_point_force: Any,
    end_point_torque: Any,
    cotangent: tuple[Any, Any],
    batched: Any,
) -> tuple[Any, ...]:
    """Batched vector-Jacobian product of :func:`sdjax.inverse_dynamics` of checked inputs (a
    model without mimic joints) by the compiled kernel (reverse mode of a batch).

    Arguments:
        axis_size: batch size ``B``.
        model, state, base_acceleration, qdd, end_point_force, end_point_torque: as
            :func:`inverse_dynamics`.
        cotangent: ``(base_wrench_bar (B, 6), tau_bar (B, n))``, the cotangents of its outputs.
        batched: booleans, the structure of ``(model, state, base_acceleration, qdd,
            end_point_force, end_point_torque)``.

    Returns:
        The cotangents of ``(model, state, base_acceleration, qdd, end_point_force,
        end_point_torque)``, that structure, each leaf ``(B, *leaf.shape)`` (one row per sample,
        a shared leaf's too); zero for the leaves the inverse dynamics does not read
        (``base_position``, ``end_point_rpy``, the mimic fields).
    """
    dtype = _dtype(model, state)
    flags = _flags((model, state, base_acceleration, qdd, end_point_force, end_point_torque), batched)
    cotangent_leaves = [jnp.asarray(c, dtype) for c in cotangent]
    bars, _ = _newton_euler_vjp(
        "inverse_dynamics_vjp_range",
        axis_size,
        model,
        state,
        (base_acceleration, qdd, end_point_force, end_point_torque),
        cotangent_leaves,
        flags,
        batched,
        extra_sizes=(),
    )
    return bars


def forward_dynamics_vjp(
    axis_size: int,
    model: Any,
    state: Any,
    controls: Any,
    acceleration: Any,
    cotangent: Any,
    batched: Any,
) -> tuple[Any, Any, Any]:
    """Batched reverse mode of :func:`sdjax.dynamics.floating_acceleration` (a model without
    mimic joints) by the compiled kernel, at the forward dynamics' solution (the
    implicit-function rule of :func:`sdjax._kernel_equations.forward_dynamics_vjp_range`, which
    refactorises ``H`` sample by sample).

    Arguments:
        axis_size: batch size ``B``.
        model, state, controls: the forward dynamics' arguments, each leaf batched or shared
            as ``batched`` (booleans, the structure of ``(model, state, controls,
            acceleration)``) says.
        acceleration: ``(B, 6 + n)`` its solution (floating order).
        cotangent: ``(B, 6 + n)`` the cotangent of the acceleration.

    Returns:
        The cotangents of ``(model, state, controls)``, that structure, each leaf ``(B,
        *leaf.shape)``; zero for the leaves the dynamics does not read.
    """
    dtype = _dtype(model, state)
    flags = _flags((model, state, controls, acceleration), batched)
    if not flags[id(acceleration)]:  # (a shared solution: the kernel reads one per sample)
        acceleration = jnp.broadcast_to(acceleration, (axis_size, *acceleration.shape))
    base_acceleration, qdd = acceleration[:, :6], acceleration[:, 6:]
    for x in (base_acceleration, qdd):
        flags[id(x)] = True
    motion = (base_acceleration, qdd, controls.end_point_force, controls.end_point_torque)
    bars, (multiplier,) = _newton_euler_vjp(
        "forward_dynamics_vjp_range",
        axis_size,
        model,
        state,
        motion,
        [jnp.asarray(cotangent, dtype)],
        flags,
        (batched[0], batched[1]),
        extra_sizes=(6 + model.num_joints,),
    )
    model_bar, state_bar, _, _, force_bar, torque_bar = bars
    controls_bar = eqx.tree_at(
        lambda c: (c.tau, c.base_force, c.base_torque, c.end_point_force, c.end_point_torque),
        controls,
        (multiplier[:, 6:], multiplier[:, :3], multiplier[:, 3:6], force_bar, torque_bar),
    )
    controls_bar = jax.tree.map(lambda bar, x: bar.astype(jnp.result_type(x)), controls_bar, controls)
    return model_bar, state_bar, controls_bar


def _newton_euler_vjp(
    kernel_name: str,
    axis_size: int,
    model: Any,
    state: Any,
    motion: tuple[Any, Any, Any, Any],
    cotangent_leaves: list[Any],
    flags: dict[int, bool],
    batched: Any,
    extra_sizes: tuple[int, ...],
) -> tuple[tuple[Any, ...], list[Array]]:
    """Runs a reverse-mode kernel of the Newton-Euler inverse dynamics (``kernel_name``: its
    inputs those of :func:`inverse_dynamics` then ``cotangent_leaves`` (batched), its outputs
    the inputs' cotangents then rows of ``extra_sizes`` numbers) and unpacks its cotangents:
    ``((model_bar, state_bar, base_acceleration_bar, qdd_bar, end_point_force_bar,
    end_point_torque_bar), extras)``, each ``(B, ...)``. ``motion``: ``(base_acceleration,
    qdd, end_point_force, end_point_torque)``; ``batched[0]``, ``batched[1]``: the model's and
    the state's batch flags."""
    dtype = _dtype(model, state)
    for c in cotangent_leaves:
        flags[id(c)] = True
    base_acceleration, qdd, end_point_force, end_point_torque = motion
    leaves = [
        *_sample_leaves(model, state, dtype, flags),
        base_acceleration,
        qdd,
        *_held_loads([end_point_force, end_point_torque], flags),
        *cotangent_leaves,
    ]
    is_batched = [bool(flags[id(x)]) for x in leaves]
    # The cotangents of the inputs before the cotangent leaves, in their order, then the extra rows.
    shapes = [tuple(np.shape(x)[1 if b else 0 :]) for x, b in zip(leaves[:20], is_batched[:20])]
    shapes[18], shapes[19] = shapes[18][1:], shapes[19][1:]  # (the end-point loads' step axis)
    shapes += [(size,) for size in extra_sizes]
    bars = _call_packed(kernel_name, axis_size, _topology(model), leaves, is_batched, dtype, shapes)
    quaternion, v0, w0, q, qd = bars[:5]
    base_acceleration_bar, qdd_bar, force_bar, torque_bar = bars[16:20]
    model_bar = _model_cotangent(axis_size, model, flags, batched[0], tuple(bars[5:16]))
    state_bar = eqx.tree_at(
        lambda s: (s.base_quaternion, s.base_linear_velocity, s.base_angular_velocity, s.q, s.qd),
        jax.tree.map(functools.partial(_zeros, axis_size), state, batched[1]),
        (quaternion, v0, w0, q, qd),
    )
    bars_out = (model_bar, state_bar, base_acceleration_bar, qdd_bar, force_bar, torque_bar)
    args = (model, state, base_acceleration, qdd, end_point_force, end_point_torque)
    return jax.tree.map(lambda bar, x: bar.astype(jnp.result_type(x)), bars_out, args), bars[20:]


def _call_packed(
    kernel_name: str,
    axis_size: int,
    topology: tuple,
    leaves: list[Any],
    is_batched: list[bool],
    dtype: Any,
    shapes: list[tuple[int, ...]],
) -> list[Array]:
    """:func:`_call` of a kernel whose outputs are arrays of ``(B, *shape)`` for each of
    ``shapes``."""
    results = [jax.ShapeDtypeStruct((axis_size, *shape), dtype) for shape in shapes]
    return _call(kernel_name, axis_size, topology, leaves, is_batched, dtype, results)


def _zeros(axis_size: int, x: Any, is_batched: bool) -> Array:
    """Zero cotangents of leaf ``x`` for ``axis_size`` samples (a row each, a shared leaf's too)."""
    return jnp.zeros((axis_size, *np.shape(x)[1 if is_batched else 0 :]), jnp.result_type(x))


def _model_cotangent(
    axis_size: int, model: Any, flags: dict[int, bool], batched_model: Any, bars: tuple[Any, ...]
) -> Any:
    """The model's cotangent (one row per sample) from the kernels' cotangents of their model
    inputs (:func:`_model_leaves`' order, the joint frames' fixed rotations in place of their
    RPY angles, mapped back here); zero for the leaves the kernels do not read."""
    base_mass, base_inertia, link_mass, link_inertia, joint_frame = bars[:5]
    # The joint frames' fixed rotations come from their RPY angles: their cotangent, mapped back.
    rpy = jnp.asarray(model.joint_rpy, joint_frame.dtype)
    if not flags[id(model.joint_rpy)]:
        rpy = jnp.broadcast_to(rpy, (axis_size, *rpy.shape))
    rpy_bar = jax.vmap(lambda angles, bar: jax.vjp(rpy_to_matrix, angles)[1](bar)[0])(rpy, joint_frame)
    model_bar = eqx.tree_at(
        lambda m: (
            m.base_mass,
            m.base_inertia,
            m.link_mass,
            m.link_inertia,
            m.joint_rpy,
            m.parent_centroid_to_joint,
            m.centroid_to_joint,
            m.centroid_to_end_point,
            m.joint_stiffness,
            m.joint_damping,
            m.gravity,
        ),
        jax.tree.map(functools.partial(_zeros, axis_size), model, batched_model),
        (base_mass, base_inertia, link_mass, link_inertia, rpy_bar, *bars[5:]),
    )
    return jax.tree.map(lambda bar, x: bar.astype(jnp.result_type(x)), model_bar, model)


def inertia_matrix(axis_size: int, model: Any, state: Any, batched: Any, *, factorise: bool = False) -> Array:
    """Batched :func:`sdjax.inertia_matrix` (a model without mimic joints) by the compiled
    kernel: ``(B, nv, nv)`` in the base mode's free coordinates, or with ``factorise`` its lower
    Cholesky factor (zero above the diagonal). ``batched``: booleans, the structure of
    ``(model, state)``."""
    dtype = _dtype(model, state)
    flags = _flags((model, state), batched)
    leaves = _sample_leaves(model, state, dtype, flags)
    nv = model.num_velocities
    results = [jax.ShapeDtypeStruct((axis_size, nv, nv), dtype)]
    is_batched = [bool(flags[id(x)]) for x in leaves]

    outputs = ((0, nv, nv), 0) if factorise else (0, (0, nv, nv))  # (the other: not computed)
    return _call("inertia_matrix_range", axis_size, _topology(model), leaves, is_batched, dtype, results, outputs)[0]


#: Smallest batch whose open-loop RK4 rollout runs in the kernel: every batch. Each rollout
#: crosses from XLA once, and the kernel is ahead from a batch of one (7-joint arm, 500 steps,
#: float64, 2-core Xeon: 6.0x the scan at batch 1, 5.4-5.8x at 2-64, 3.6x at 256;
#: ``benchmarks/bench_rollout_crossover.py``).
MIN_ROLLOUT_BATCH = 1


def rk4_rollout(axis_size: int, model: Any, state: Any, dt: Any, controls: Any, batched: Any) -> Array:
    """Batched open-loop RK4 rollout (:func:`sdjax.integrate.rollout` with a control sequence
    or none) by the compiled kernel: four forward dynamics per step, all steps in one call.

    Arguments:
        axis_size: batch size ``B``.
        model, state: the system and its initial :class:`~sdjax.state.State`.
        dt: step, s (scalar).
        controls: :class:`~sdjax.dynamics.Controls` held over each step, leaves with a leading
            axis ``N`` (number of steps).
        batched: booleans, the structure of ``(model, state, dt, controls)``: which leaves
            carry the batch on axis 0.

    Returns:
        ``(B, N, 13 + 2 n)`` states after each step, packed as ``[r0, quat, v0, w0, q, qd]``.
    """
    flags = _flags((model, state, dt, controls), batched)
    num_steps = controls.tau.shape[1 if flags[id(controls.tau)] else 0]
    return _rollout(axis_size, "none", model, state, dt, controls, _no_law(model, flags), num_steps, flags)[0]


def _no_law(model: Any, flags: dict[int, bool]) -> tuple:
    """The joint law's inputs of an open-loop :func:`_rollout` (not read): one row, one step of
    noise, the plant's model leaves (shared stand-ins of the batched ones, so that a batch of
    models is not passed twice)."""
    n = model.num_joints
    row, noise = jnp.zeros((n,), model.joint_rpy.dtype), jnp.zeros((1, n), model.joint_rpy.dtype)
    law_model = jax.tree.map(lambda x: jnp.zeros(x.shape[1:], x.dtype) if flags[id(x)] else x, model)
    for x in (row, noise, *jax.tree.leaves(law_model)):
        flags.setdefault(id(x), False)
    return (law_model, row, row, row, row, row, noise)


def stage_size(n: int) -> int:
    """``16 + 3 n``: the numbers of one RK4 stage stored by :func:`rk4_step` (``n`` joints)."""
    return 16 + 3 * n


def rk4_step(
    axis_size: int, model: Any, state: Any, dt: Any, controls: Any, batched: Any, *, with_stages: bool
) -> tuple[Array, Array | None]:
    """Batched :func:`sdjax.integrate.rk4_step` without environment loads (a model without
    mimic joints) by the compiled kernel: one step, ``controls`` held over it.

    Arguments:
        axis_size: batch size ``B``.
        model, state, dt, controls: the step's arguments, each leaf batched (batch on axis 0) or
            shared as ``batched`` (booleans, the structure of ``(model, state, dt, controls)``)
            says.
        with_stages: also return the four stages (what reverse mode reads: :func:`rk4_step_vjp`).

    Returns:
        ``(new_state (B, 13 + 2 n), stages (B, 4, 16 + 3 n) or None)``: the state after the step
        packed as ``[r0, quat, v0, w0, q, qd]``; each stage's state ``[quat, v0, w0, q, qd]`` and
        accelerations ``[dv0/dt, dw0/dt, qdd]``.
    """
    flags = _flags((model, state, dt, controls), batched)
    held = _HeldLoads(*_held_loads(_controls_leaves(controls), flags))
    states, _, stages = _rollout(
        axis_size, "none", model, state, dt, held, _no_law(model, flags), 1, flags, with_stages=with_stages
    )
    return states[:, 0], (stages if with_stages else None)


def rk4_step_vjp(
    axis_size: int, model: Any, state: Any, dt: Any, controls: Any, stages: Any, cotangent: Any, batched: Any
) -> tuple[Any, Any, Any, Any]:
    """Batched reverse mode of :func:`rk4_step` by the compiled kernel
    (:func:`sdjax._kernel_equations.rk4_step_vjp_range`: the four stages transposed, each
    stage's forward dynamics by its implicit-function rule).

    Arguments:
        axis_size: batch size ``B``.
        model, state, dt, controls: the step's arguments, batched or shared as ``batched``
            (booleans, the structure of ``(model, state, dt, controls, stages)``) says.
        stages: ``(B, 4, 16 + 3 n)`` the step's stages (:func:`rk4_step`).
        cotangent: a :class:`~sdjax.state.State` of ``(B, ...)`` leaves, the cotangent of the
            state after the step.

    Returns:
        The cotangents of ``(model, state, dt, controls)``, that structure, each leaf ``(B,
        *leaf.shape)`` (one row per sample, a shared leaf's too); zero for the leaves the step
        does not read.
    """
    dtype = _dtype(model, state)
    flags = _flags((model, state, dt, controls, stages), batched)
    if not flags[id(stages)]:
        stages = jnp.broadcast_to(stages, (axis_size, *stages.shape))
    packed = jnp.concatenate([jnp.asarray(x, dtype) for x in _state_fields(cotangent)], axis=-1)
    for x in (stages, packed):
        flags[id(x)] = True
    leaves = [
        *_sample_leaves(model, state, dtype, flags),
        *_held_loads(_controls_leaves(controls), flags),
        dt,
        stages,
        packed,
    ]
    is_batched = [bool(flags[id(x)]) for x in leaves]
    n, ne = model.num_joints, model.num_end_points
    shapes = [(13 + 2 * n,)] + [tuple(np.shape(x)[1 if b else 0 :]) for x, b in zip(leaves[5:16], is_batched[5:16])]
    shapes += [(n,), (3,), (3,), (ne, 3), (ne, 3), ()]
    bars = _call_packed("rk4_step_vjp_range", axis_size, _topology(model), leaves, is_batched, dtype, shapes)
    state_bar = unpacked_states(bars[0], state)
    model_bar = _model_cotangent(axis_size, model, flags, batched[0], tuple(bars[1:12]))
    controls_bar = eqx.tree_at(
        lambda c: (c.tau, c.base_force, c.base_torque, c.end_point_force, c.end_point_torque),
        controls,
        tuple(bars[12:17]),
    )
    dt_bar = jnp.reshape(bars[17], (axis_size, *np.shape(dt)[1 if batched[2] else 0 :]))
    bars_out = (model_bar, state_bar, dt_bar, controls_bar)
    return jax.tree.map(lambda bar, x: bar.astype(jnp.result_type(x)), bars_out, (model, state, dt, controls))


def _state_fields(state: Any) -> list[Any]:
    """A :class:`~sdjax.state.State`'s leaves in the kernels' packed order ``[r0, quat, v0, w0, q, qd]``."""
    return [
        state.base_position,
        state.base_quaternion,
        state.base_linear_velocity,
        state.base_angular_velocity,
        state.q,
        state.qd,
    ]


def unpacked_states(packed: Array, state: Any) -> Any:
    """States packed by the kernels as ``[r0, quat, v0, w0, q, qd]`` along the last axis (any
    leading axes), as a pytree of the structure of ``state`` (a :class:`~sdjax.state.State`:
    the fields keep their leading axes, which the per-sample ``State`` check would refuse)."""
    n = np.shape(state.q)[-1]
    return jax.tree.unflatten(jax.tree.structure(state), jnp.split(packed, [3, 7, 10, 13, 13 + n], axis=-1))


class JointLaw(NamedTuple):
    """The joint law of :func:`controlled_rk4_rollout` (the law of
    :class:`sdjax.montecarlo.ControlScenario` without constraints), evaluated at the start of
    each step and held over it: ``clip(law(state), -limit, limit) + bias + noise[step]``.

    Attributes:
        kind: ``"pd"`` (``kp (goal - q) + kd (0 - qd)``, :class:`sdjax.JointPD`) or
            ``"computed_torque"`` (:class:`sdjax.ComputedTorque` on ``model``, floating base,
            zero momentum, ``u = kd (0 - qd) + kp (goal - q)``).
        model: the controller's model (a floating base, the plant's topology; read for
            ``"computed_torque"`` only).
        kp, kd, goal, limit, bias: ``(n,)`` gains (1/s^2 and 1/s for computed torque, N m/rad
            and N m s/rad for PD), set point, rad, saturation and bias, N m.
        noise: ``(N, n)`` torque added at each step, N m.
    """

    kind: str
    model: Any
    kp: Any
    kd: Any
    goal: Any
    limit: Any
    bias: Any
    noise: Any


def controlled_rk4_rollout(
    axis_size: int, model: Any, state: Any, dt: Any, law: JointLaw, controls: Any, num_steps: int, batched: Any
) -> tuple[Array, Array]:
    """Batched closed-loop RK4 rollout by the compiled kernel: ``law`` evaluated at the start of
    each step and held over it, the base loads of ``controls`` throughout, all steps in one
    call (the law of :class:`sdjax.montecarlo.ControlScenario` stepped by :func:`sdjax.rollout`).

    Arguments:
        axis_size: batch size ``B``.
        model, state, dt: the plant, its initial :class:`~sdjax.state.State`, the step (s).
        law: the :class:`JointLaw`.
        controls: :class:`~sdjax.dynamics.Controls` of one step: its ``base_force`` and
            ``base_torque`` are held throughout (``tau`` is not read: the law's torques
            replace it), with its end-point loads.
        num_steps: number of steps ``N``.
        batched: booleans, the structure of ``(model, state, dt, law, controls)``.

    Returns:
        ``(states (B, N, 13 + 2 n), tau (B, N, n))``: the states after each step, packed as
        ``[r0, quat, v0, w0, q, qd]``, and the law's joint torques held over each step.
    """
    flags = _flags((model, state, dt, law, controls), batched)
    held = _HeldLoads(*_held_loads(_controls_leaves(controls), flags))  # (one step, held throughout)
    fields = (law.model, law.kp, law.kd, law.goal, law.limit, law.bias, law.noise)
    return _rollout(axis_size, law.kind, model, state, dt, held, fields, num_steps, flags)[:2]


class _HeldLoads(NamedTuple):
    """Loads in the kernel's layout (the fields of :class:`~sdjax.dynamics.Controls`)."""

    tau: Any
    base_force: Any
    base_torque: Any
    end_point_force: Any
    end_point_torque: Any


def _rollout(
    axis_size: int,
    kind: str,
    model: Any,
    state: Any,
    dt: Any,
    controls: Any,
    law: tuple,
    num_steps: int,
    flags: dict[int, bool],
    *,
    with_stages: bool = False,
) -> tuple[Array, Array, Array]:
    """The kernel :func:`sdjax._kernel_equations.rk4_rollout` on a batch: ``controls`` with a
    step axis (``N`` or 1) after any batch axis, ``law = (model, kp, kd, goal, limit, bias,
    noise)``, ``flags``: id of each leaf -> batched. Returns the states, the law's torques and
    (``with_stages``; otherwise an empty array) the last step's stages."""
    dtype = _dtype(model, state)
    law_model, *law_arrays = law
    leaves = [
        *_state_fields(state),
        *_model_leaves(model),
        *_controls_leaves(controls),
        dt,
        *_model_leaves(law_model),
        *law_arrays,
    ]
    is_batched = [bool(flags[id(x)]) for x in leaves]
    # The fixed rotations of the joint frames replace their RPY angles (plant and controller).
    for index in (10, 27):
        leaves[index] = rpy_to_matrix(jnp.asarray(leaves[index], dtype))
    n = model.num_joints
    results = [
        jax.ShapeDtypeStruct((axis_size, num_steps, 13 + 2 * n), dtype),
        jax.ShapeDtypeStruct((axis_size if kind != "none" else 0, num_steps, n), dtype),
        jax.ShapeDtypeStruct((axis_size if with_stages else 0, 4, stage_size(n)), dtype),
    ]
    topology = (*_topology(model), getattr(_equations(), "LAW_" + kind.upper()))  # (the kernel's code)
    out = _call("rk4_rollout", axis_size, topology, leaves, is_batched, dtype, results)
    return out[0], out[1], out[2]


_lock = threading.Lock()


def _smallest_range(kernel_name: str) -> int:
    """The fewest samples a thread takes of a batch: :data:`MIN_BATCH` / 2 (any number for
    rollouts, whose samples each take many steps)."""
    return 1 if kernel_name == "rk4_rollout" else max(1, MIN_BATCH // 2)


def _run(kernel: Callable[..., Any], count: int, topology: tuple, arrays: list, outputs: tuple) -> None:
    """``kernel`` over a batch of ``count`` samples, one contiguous range of samples per core
    (ranges of at least :data:`MIN_BATCH` / 2 samples for the forward dynamics; any size for
    rollouts). Calls are serialised (XLA may run two callbacks at once; the cores are busy
    either way)."""
    smallest = _smallest_range(kernel.__name__)
    parts = max(1, min(_thread_count(), count // smallest))
    bounds = [count * k // parts for k in range(parts + 1)]
    with _lock:
        if parts == 1:
            kernel(*topology, *arrays, *outputs, 0, count)
            return
        # The other ranges on the pool, the first on this thread.
        futures = [
            _threads().submit(kernel, *topology, *arrays, *outputs, lo, hi) for lo, hi in zip(bounds[1:-1], bounds[2:])
        ]
        kernel(*topology, *arrays, *outputs, bounds[0], bounds[1])
        for future in futures:
            future.result()


__all__: list[str] = []
