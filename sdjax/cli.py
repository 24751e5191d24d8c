"""Command line: ``sdjax {demo,info,simulate,plot,view,plan,identify,montecarlo,kernels}`` (also ``python -m sdjax ...``).

::

    sdjax demo [--model NAME]                     simulate a built-in robot, print a summary
    sdjax info MODEL                              topology, masses, end points, checks
    sdjax simulate MODEL --duration 10 --dt 0.01 --controller pd --target 0.3 0.2 0.1 0.6 0.5 0.4 \\
                   --out run.npz                  chunked simulation with a progress bar
    sdjax plot run.npz --out plots/ --animate run.gif
    sdjax view run.npz [more.npz ...] [--model MODEL] [--port 8080] [--no-browser] [--no-meshes]
                                                  3-D viewer in the browser (pip install 'sdjax[viewer]');
                                                  a URDF/MJCF --model is drawn with its visual meshes
    sdjax plan CONFIG.toml [--out DIR] [--force] [--set KEY=VALUE]
                                                  plan a motion (reactionless, straight_line, optimize): run
                                                  file, JSON summary, plots
    sdjax identify CONFIG.toml [...]              identify a payload / links from a simulated excitation
    sdjax montecarlo CONFIG.toml [...]            batch Monte-Carlo: results file, statistics, plots
    sdjax kernels [--precision float64]           compile the CPU batch kernels (Numba) ahead of first use

The last three read a small TOML file (``sdjax.cli_jobs``; examples in ``examples/``), validated
key by key (errors name the file and the dotted key).

``MODEL`` is a built-in name (``sdjax.models.BUILTIN_MODELS``) or a model file read by
``sdjax.io.loader.load_model`` (chosen by suffix, e.g. ``.json``). Bad input (a missing or
malformed file, an impossible number, a vector of the wrong length) ends the command with one
line ``sdjax: error: ...`` on stderr and exit status 2 (usage) or 1 (input files, run time);
never with a traceback (``SDJAX_DEBUG=1`` shows one for unexpected failures).

The command line is an application, so unlike the library it enables JAX's float64 mode
(``--float32`` keeps single precision).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, NoReturn

import numpy as np

from sdjax.cli_jobs import JOBS, duration_steps, output_name_problem, unwritable

__all__ = ["MAX_STEPS", "SIMULATE_DT", "TREE_DRAWN_DEPTH", "build_parser", "main"]


class UsageError(Exception):
    """Bad command-line usage (exit status 2)."""


class CommandError(Exception):
    """A command failed on its input (exit status 1)."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports errors by raising :class:`UsageError` (printed as one line)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


# ------------------------------------------------------------------------------------------
# Argument types.


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _positive(text: str) -> float:
    value = _number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


#: Most integration steps one ``demo`` or ``simulate`` run may take (duration / dt), checked
#: before anything is allocated: 1e7 steps of a 7-joint arm are ~2 GB of trajectory.
MAX_STEPS = 10_000_000


def _num_steps(duration: float, dt: float) -> int:
    """``duration / dt`` steps (``cli_jobs.duration_steps``: a whole number of them, 1 to
    :data:`MAX_STEPS`), refused as a usage error naming ``--duration`` and ``--dt``."""
    try:
        return duration_steps(duration, dt, MAX_STEPS, "--duration", "--dt")
    except ValueError as err:
        raise UsageError(str(err)) from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


#: Largest ``plot --dpi``: print resolution. A time-history figure is up to 11 x 14 inches, so
#: 600 dpi is ~55 M pixels (~220 MB drawn); 4000 dpi asked for ~10 GB.
MAX_DPI = 600


def _dpi(text: str) -> int:
    value = _positive_int(text)
    if value > MAX_DPI:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_DPI}, got {value}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number in 0..65535, got {text!r}")
    return value


def _numbers(text: str) -> list[float]:
    """One command-line word of numbers: ``0.1`` or ``0.1,0.2,-0.3``."""
    return [_number(part) for part in text.split(",") if part.strip()] or [_number(text)]


def _vector(
    name: str, words: list[list[float]] | None, size: int, *, allow_scalar: bool = False, per_joint: bool = True
) -> np.ndarray | None:
    if words is None:
        return None
    values = np.asarray([v for word in words for v in word], np.float64)
    if allow_scalar and values.size == 1:
        return np.full(size, values[0])
    if values.size != size:
        expected = f"1 or {size}" if allow_scalar else f"{size}"
        hint = f" (the model has {size} joints)" if per_joint else ""
        raise UsageError(f"{name}: expected {expected} values{hint}, got {values.size}")
    return values


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


# ------------------------------------------------------------------------------------------
# Shared set-up.


def _setup_jax(float32: bool):
    import jax

    if not float32:
        jax.config.update("jax_enable_x64", True)
    return jax


def _reader_options(args: argparse.Namespace) -> dict:
    """The reader options given on the command line (see :func:`_add_reader_options`)."""
    options = {
        "base": args.base,
        "inertia_check": args.inertia_check,
        "gravity": _vector("--gravity", args.gravity, 3, per_joint=False) if args.gravity is not None else None,
        "end_points": args.end_points,
        "mimic": args.mimic,
    }
    return {key: value for key, value in options.items() if value is not None}


def _load_model(spec: str, float32: bool = False, options: dict | None = None):
    """A built-in model by name, or a model file (``sdjax.io.loader.load_model``), with the
    reader options of :func:`_reader_options`."""
    import jax.numpy as jnp

    from sdjax.model import edit_model
    from sdjax.models import BUILTIN_MODELS

    options = options or {}
    if spec in BUILTIN_MODELS:
        if "end_points" in options or "mimic" in options:
            raise UsageError(
                "--end-points and --mimic read URDF files; built-in models have their end points and joints"
            )
        model = BUILTIN_MODELS[spec]()
        model = edit_model(model, **options) if options else model
    elif os.path.isfile(spec):
        from sdjax.io.loader import load_model

        model = load_model(spec, **options)
    elif os.path.exists(spec):
        raise CommandError(f"{spec}: not a model file")
    else:
        raise CommandError(
            f"{spec}: no such model file, and not a built-in model ({', '.join(sorted(BUILTIN_MODELS))})"
        )
    return model.astype(jnp.float32) if float32 else model


# ------------------------------------------------------------------------------------------
# demo


def _demo(args: argparse.Namespace) -> int:
    import jax
    import jax.numpy as jnp

    if not args.float32:
        jax.config.update("jax_enable_x64", True)
    import sdjax
    from sdjax.models import BUILTIN_MODELS
    from sdjax.models.builtin import free_flying_arm_initial_q

    model = BUILTIN_MODELS[args.model]()
    n = model.num_joints
    if args.model == "spacedyn_sample":
        # sample_v1r2.m: PD towards q_des from rest at q = 0, kp = kd = 10.
        target = jnp.asarray([0.3, 0.2, 0.1, 0.6, 0.5, 0.4], model.dtype)
        start_q = np.zeros(n)
        kp, kd = jnp.full(n, 10.0, model.dtype), jnp.full(n, 10.0, model.dtype)
    else:
        start_q = free_flying_arm_initial_q()
        target = jnp.asarray(start_q + 0.3, model.dtype)
        # Gains scaled by each joint's effective inertia (diagonal of the generalized
        # inertia H*): a critically damped 1 rad/s response per joint.
        inertia = jnp.diagonal(sdjax.generalized_inertia_matrix(model, sdjax.make_state(model, q=start_q)))
        kp, kd = inertia * 1.0, inertia * 2.0

    def pd_control(t, state):
        return kp * (target - state.q) - kd * state.qd

    state0 = sdjax.make_state(model, q=start_q)
    steps = _num_steps(args.duration, args.dt)
    simulate = jax.jit(lambda m, s: sdjax.rollout(m, s, args.dt, steps, pd_control))
    t_start = time.perf_counter()
    compiled = simulate.lower(model, state0).compile()
    t_compiled = time.perf_counter()
    trajectory = jax.block_until_ready(compiled(model, state0))
    t_run = time.perf_counter() - t_compiled

    first = jax.tree.map(lambda x: x[0], trajectory.states)
    last = jax.tree.map(lambda x: x[-1], trajectory.states)
    p0, p1 = sdjax.linear_momentum(model, first), sdjax.linear_momentum(model, last)
    l0, l1 = sdjax.angular_momentum(model, first), sdjax.angular_momentum(model, last)
    com0, com1 = sdjax.center_of_mass(model, first), sdjax.center_of_mass(model, last)
    relative = np.asarray(sdjax.quat_multiply(last.base_quaternion, sdjax.quat_conjugate(first.base_quaternion)))
    attitude_change = 2.0 * np.degrees(np.arctan2(np.linalg.norm(relative[:3]), abs(relative[3])))
    lines = [
        f"sdjax {sdjax.__version__} demo: free-floating {model.name} ({n} joints, {model.num_end_points} end points, "
        f"{float(model.total_mass):.1f} kg), {jnp.dtype(model.dtype).name}",
        f"  {steps} RK4 steps of {args.dt} s ({args.duration} s), joint PD control, no gravity",
        f"  compile {t_compiled - t_start:.2f} s, run {t_run * 1e3:.1f} ms ({steps / t_run:,.0f} steps/s)",
        f"  final q      [rad|m]: {np.array2string(np.asarray(last.q), precision=4)}",
        f"  target q     [rad|m]: {np.array2string(np.asarray(target), precision=4)}",
        f"  base moved {np.linalg.norm(np.asarray(last.base_position - first.base_position)):.4f} m, "
        f"turned {attitude_change:.3f} deg (reaction to the arm motion)",
        f"  centre of mass drift {np.linalg.norm(np.asarray(com1 - com0)):.2e} m",
        f"  momentum drift: linear {np.linalg.norm(np.asarray(p1 - p0)):.2e} kg m/s, "
        f"angular {np.linalg.norm(np.asarray(l1 - l0)):.2e} kg m^2/s (started at rest: both conserved at zero)",
    ]
    print("\n".join(lines))
    return 0


# ------------------------------------------------------------------------------------------
# info


#: Default integration step of ``sdjax simulate``, s.
SIMULATE_DT = 0.01

#: Levels of the link tree that ``sdjax info`` indents; deeper links are printed with their depth.
TREE_DRAWN_DEPTH = 24


def _tree_lines(model) -> list[str]:
    masses = np.asarray(model.link_mass, np.float64)
    ends_on: dict[int, list[str]] = {}
    for e, body in enumerate(model.end_point_link):
        ends_on.setdefault(body, []).append(model.end_point_names[e])

    def ends(body: int) -> str:
        names = ends_on.get(body, [])
        return f"  [end point{'s' if len(names) > 1 else ''}: {', '.join(names)}]" if names else ""

    kinds = {"R": "revolute", "P": "prismatic"}
    children: dict[int, list[int]] = {}
    for k, p in enumerate(model.parent):
        children.setdefault(p, []).append(k + 1)
    lines = [f"  base  ({float(model.base_mass):g} kg){ends(0)}"]
    # Depth first with an explicit stack (a long flexible beam is thousands of links deep);
    # indentation stops growing at TREE_DRAWN_DEPTH levels, deeper links state their depth.
    stack = [(link, "", idx == len(children.get(0, [])) - 1, 1) for idx, link in enumerate(children.get(0, []))][::-1]
    while stack:
        link, prefix, last, depth = stack.pop()
        k = link - 1
        deep = f"  (depth {depth})" if depth > TREE_DRAWN_DEPTH else ""
        leader = model.mimic_leader[k]
        mimic = (
            f", mimics {leader} ({float(model.mimic_multiplier[k]):g} x {model.link_names[leader - 1]}"
            f" + {float(model.mimic_offset[k]):g})"
            if leader
            else ""
        )
        lines.append(
            f"  {prefix}{'`-- ' if last else '|-- '}{link} {model.link_names[k]}  {kinds[model.joint_type[k]]}{mimic}, "
            f"{masses[k]:g} kg{ends(link)}{deep}"
        )
        kids = children.get(link, [])
        inner = prefix + ("    " if last else "|   ") if depth < TREE_DRAWN_DEPTH else prefix
        stack += [(child, inner, idx == len(kids) - 1, depth + 1) for idx, child in enumerate(kids)][::-1]
    return lines


def _momentum_change(model, linear: np.ndarray, angular: np.ndarray) -> str:
    """The change over a run of the momentum components the base mode leaves free (conserved
    without applied loads): all six floating, ``P_x, P_y, L_z`` planar, none fixed."""
    if model.base == "fixed":
        return "momentum not conserved (fixed base)"
    if model.base == "planar":
        change = np.concatenate([linear[-1, :2] - linear[0, :2], angular[-1, 2:] - angular[0, 2:]])
        return f"change of P_x, P_y, L_z: {np.array2string(change, precision=2)}"
    return (
        f"momentum change: linear {np.linalg.norm(linear[-1] - linear[0]):.2e} kg m/s, "
        f"angular {np.linalg.norm(angular[-1] - angular[0]):.2e} kg m^2/s"
    )


def _kernels(args: argparse.Namespace) -> int:
    """Compiles every entry kernel of :mod:`sdjax.batch_kernel` (and its entry from XLA) in the
    chosen precisions into the on-disk caches, so that the first batched call of a later process
    loads them instead of compiling (80-91 s for all of them, per precision, on a 2-core CPU;
    about 6 s to load): for a container image, a cluster node, or before a run that must not
    wait. The check of what was reached reads this process's calls: run it in a fresh process
    (as the command line does)."""
    jax = _setup_jax(False)
    from sdjax import batch_kernel

    if not batch_kernel.available():
        raise CommandError(
            "the batch kernels are not in use here: they need Numba (pip install 'sdjax[fast]'), the CPU "
            f"backend (this one: {jax.default_backend()}) and {batch_kernel.KERNEL_ENV} unset or 'auto'"
        )
    precisions = ("float64", "float32") if args.precision == "both" else (args.precision,)
    for precision in precisions:
        start = time.perf_counter()
        _call_every_kernel(precision)
        missing = [n for n in batch_kernel.ENTRY_KERNELS if (n, precision) not in batch_kernel.kernels_called()]
        if missing:  # (a route of batch_kernel that _call_every_kernel does not reach)
            raise CommandError(f"{precision}: kernels not reached: {', '.join(missing)}")
        print(f"{precision}: {len(batch_kernel.ENTRY_KERNELS)} kernels ready in {time.perf_counter() - start:.1f} s")
    return 0


def _call_every_kernel(precision: str) -> None:
    """Calls each entry kernel once in ``precision`` (a batch of :data:`sdjax.batch_kernel.MIN_BATCH`
    samples of a small branched tree with prismatic and passive joints, gravity and end points):
    forward and inverse dynamics and their reverse modes, ``H``, an open-loop rollout, and the
    RK4 steps of a closed loop with their reverse mode."""
    import jax
    import jax.numpy as jnp

    import sdjax
    from sdjax import batch_kernel, dynamics
    from sdjax.models import random_model

    dtype = jnp.dtype(precision)
    model = random_model(5, 4, chain_probability=0.5, prismatic_probability=0.5, gravity=True, passive=True)
    model = model.astype(dtype)
    batch, n, ne = batch_kernel.MIN_BATCH, model.num_joints, model.num_end_points
    rng = np.random.default_rng(0)
    q, qd = (jnp.asarray(rng.normal(size=(batch, n)), dtype) for _ in range(2))
    states = jax.vmap(lambda q, qd: sdjax.make_state(model, q=q, qd=qd))(q, qd)
    controls = dynamics.Controls(
        jnp.asarray(rng.normal(size=(batch, n)), dtype),
        jnp.zeros((batch, 3), dtype),
        jnp.zeros((batch, 3), dtype),
        jnp.zeros((batch, ne, 3), dtype),
        jnp.zeros((batch, ne, 3), dtype),
    )

    def loss(m, s, c):
        acceleration = jax.vmap(lambda s, c: dynamics.floating_acceleration(m, s, c))(s, c)
        wrench, tau = jax.vmap(lambda s, a: sdjax.inverse_dynamics(m, s, a[:6], a[6:]))(s, jnp.sin(acceleration))
        held = jax.tree.map(lambda x: jnp.stack([x, -x], axis=1), c)  # (2 steps per sample)
        open_loop = jax.vmap(lambda s, c: sdjax.rollout(m, s, 0.01, 2, c).states.q[-1])(s, held)

        def closed_loop(state, c):
            def law(t, x):
                return dynamics.Controls(
                    -x.q - x.qd, c.base_force, c.base_torque, c.end_point_force, c.end_point_torque
                )

            return sdjax.rollout(m, state, 0.01, 2, law).states.qd[-1]

        closed = jax.vmap(closed_loop)(s, c)
        inertia = jax.vmap(lambda s: sdjax.inertia_matrix(m, s))(s)
        return sum(jnp.sum(x) for x in (acceleration, wrench, tau, open_loop, closed, inertia))

    jax.block_until_ready(jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))(model, states, controls))


def _info(args: argparse.Namespace) -> int:
    _setup_jax(False)
    import jax.numpy as jnp

    import sdjax

    model = _load_model(args.model, options=_reader_options(args))
    n, ne = model.num_joints, model.num_end_points
    revolute = sum(t == "R" for t in model.joint_type)
    link_mass = float(jnp.sum(model.link_mass))
    source = "built-in" if not os.path.isfile(args.model) else os.path.abspath(args.model)
    moments = np.linalg.eigvalsh(np.asarray(model.base_inertia, np.float64))
    lines = [
        f"model {model.name}  ({source})",
        f"  bodies {n + 1} (base + {n} links), joints {n} ({revolute} revolute, {n - revolute} prismatic), "
        f"DOF {model.num_velocities} ({model.num_base_velocities} base + {model.num_joint_coordinates} joints"
        + (f", {n - model.num_joint_coordinates} mimic" if model.has_mimic else "")
        + f"; {model.base} base), end points {ne}",
        f"  mass: base {float(model.base_mass):g} kg, links {link_mass:g} kg, total {float(model.total_mass):g} kg",
        f"  base principal moments of inertia [kg m^2]: {np.array2string(moments, precision=4)}",
        f"  gravity [m/s^2]: {np.array2string(np.asarray(model.gravity), precision=4)}",
        "tree:",
        *_tree_lines(model),
    ]
    if ne:
        lines.append("end points:")
        for e, (link, path) in enumerate(zip(model.end_point_link, model.end_point_paths)):
            body = f"link {link} ({model.link_names[link - 1]})" if link > 0 else "the base"
            joints = "-".join(map(str, path)) or "none"
            lines.append(f"  {e + 1} {model.end_point_names[e]}: on {body}, joints from the base: {joints}")
    passive = [k for k in range(n) if float(model.joint_stiffness[k]) != 0 or float(model.joint_damping[k]) != 0]
    if passive:
        lines.append("passive joints (stiffness K, damping D):")
        for k in passive:
            lines.append(
                f"  {k + 1} {model.link_names[k]}: K = {float(model.joint_stiffness[k]):g}, D = {float(model.joint_damping[k]):g}"
            )
    # Checks: the model passed validation when it was built; then its inertia matrix at q = 0
    # (positive definite and well conditioned, or forward dynamics will fail or lose digits).
    lines.append("checks:")
    rule = (
        "obeying the triangle inequality"
        if model.inertia_check == "physical"
        else "(triangle inequality not required: SpaceDyn's rule)"
    )
    base_rule = "non-negative base mass" if model.base == "fixed" else "positive base mass"
    lines.append(
        f"  ok    validation: shapes, parent < link numbering, joint types, {base_rule}, non-negative link masses,"
    )
    lines.append(
        f"        symmetric positive-semidefinite link inertia {rule}, non-negative stiffness/damping, finite values"
    )
    state = sdjax.make_state(model)
    h = np.asarray(sdjax.inertia_matrix(model, state), np.float64)
    eig = np.linalg.eigvalsh(0.5 * (h + h.T))
    condition = eig[-1] / eig[0] if eig[0] > 0 else math.inf
    good = eig[0] > 0 and condition < 1e12
    lines.append(
        f"  {'ok  ' if good else 'WARN'}  inertia matrix H ({h.shape[0]}x{h.shape[1]}) at q = 0: eigenvalues {eig[0]:.3g} .. {eig[-1]:.3g}, "
        f"condition number {condition:.3g}" + ("" if good else " (singular or ill-conditioned)")
    )
    if good:
        # Stiff passive joints (URDF damping on light links) limit explicit steps.
        step = sdjax.max_stable_step(model, state)
        if math.isfinite(step):
            short = step < SIMULATE_DT
            lines.append(
                f"  {'WARN' if short else 'ok  '}  largest stable RK4 step of the passive joint terms at q = 0: {step:.3g} s"
                + (
                    f" (below simulate's default --dt {SIMULATE_DT}: use --dt {0.5 * step:.2g} or smaller, or --integrator implicit)"
                    if short
                    else ""
                )
            )
    print("\n".join(lines))
    return 0


# ------------------------------------------------------------------------------------------
# simulate


def _simulate(args: argparse.Namespace) -> int:
    jax = _setup_jax(args.float32)
    import jax.numpy as jnp

    import sdjax
    from sdjax.simulation import SimulationRun, simulate

    steps = _num_steps(args.duration, args.dt)
    if args.controller == "none" and (args.target is not None or args.move_time is not None):
        raise UsageError("--target and --move-time need --controller pd or computed-torque")
    if args.controller != "none" and args.target is None:
        raise UsageError(f"--controller {args.controller} needs --target (one value per joint)")
    if args.controller != "pd" and (args.kp is not None or args.kd is not None):
        raise UsageError("--kp and --kd are torque gains of --controller pd (computed torque uses --bandwidth)")
    # The output is checked before the run: the file name numpy will write (".npz" appended
    # when missing), an existing file only with --force, a writable directory.
    _check_output_name(args.out, "--out", file=True)  # (as given: "" and "sub/" are no file names)
    if os.path.isdir(args.out):
        raise CommandError(f"--out {args.out}: is a directory; name a file in it")
    out = args.out if args.out.endswith(".npz") else args.out + ".npz"
    _check_output_file(out, args.force, "--out")
    model = _load_model(args.model, args.float32, _reader_options(args))
    n, dtype = model.num_joints, model.dtype
    q0 = _vector("--initial-q", args.initial_q, n)
    qd0 = _vector("--initial-qd", args.initial_qd, n)
    target = _vector("--target", args.target, n)
    kp = _vector("--kp", args.kp, n, allow_scalar=True)
    kd = _vector("--kd", args.kd, n, allow_scalar=True)
    base_rpy = _vector("--base-rpy", args.base_rpy, 3, per_joint=False) if args.base_rpy is not None else None
    if (kp is not None and np.any(kp < 0)) or (kd is not None and np.any(kd < 0)):
        raise UsageError("--kp and --kd must be non-negative")
    state = sdjax.make_state(model, q=q0, qd=qd0, base_rpy=base_rpy)
    start = np.asarray(state.q, np.float64)

    control: sdjax.JointPD | sdjax.ComputedTorque | None = None
    info: dict[str, Any] = {"controller": args.controller}
    if args.controller != "none":
        assert target is not None  # (checked above: a controller needs --target)
        reference: sdjax.QuinticJointReference | sdjax.JointReference
        if args.move_time is not None:
            reference = sdjax.QuinticJointReference(
                jnp.asarray(start, dtype), jnp.asarray(target, dtype), args.move_time
            )
        else:
            reference = sdjax.JointReference(jnp.asarray(target, dtype))
        w = args.bandwidth
        if args.controller == "pd":
            # Default gains: a critically damped response of natural frequency w per joint,
            # scaled by the joint's effective inertia (diagonal of the generalized inertia H*).
            # (mimic joints: no gain of their own, their leader's actuator moves them)
            inertia = np.asarray(
                sdjax.model.on_independent_joints(model, sdjax.generalized_inertia_matrix(model, state).diagonal()),
                np.float64,
            )
            kp = inertia * w**2 if kp is None else kp
            kd = 2.0 * inertia * w if kd is None else kd
            control = sdjax.JointPD(jnp.asarray(kp, dtype), jnp.asarray(kd, dtype), reference)
            info.update(kp=kp.tolist(), kd=kd.tolist())
        else:
            control = sdjax.ComputedTorque(model, jnp.asarray(w**2, dtype), jnp.asarray(2.0 * w, dtype), reference)
            info.update(kp=w**2, kd=2.0 * w)
        info.update(target=target.tolist(), move_time=args.move_time, bandwidth=w)

    chunk = args.chunk_steps
    from sdjax.simulation import DEFAULT_CHUNK_STEPS

    progress = not args.no_progress and steps > (chunk or DEFAULT_CHUNK_STEPS)
    t_start = time.perf_counter()
    integrator = args.integrator
    if integrator == "auto":
        # RK4 unless the passive joint terms need a shorter step than --dt (URDF damping on
        # light links): then the step with those terms implicit, which is stable at any step.
        integrator = "rk4" if args.dt <= sdjax.max_stable_step(model, state) else "implicit"
    trajectory = simulate(
        model, state, args.dt, steps, control, chunk_steps=chunk, progress=progress, integrator=integrator
    )
    jax.block_until_ready(trajectory)
    wall = time.perf_counter() - t_start
    info.update(
        dt=args.dt,
        duration=steps * args.dt,
        num_steps=steps,
        integrator=integrator,
        initial_q=start.tolist(),
        wall_s=wall,
        sdjax_version=sdjax.__version__,
        command=["sdjax", *args.argv],
    )
    run = SimulationRun(model, trajectory, info=info)
    run.save(out)

    q = np.asarray(trajectory.states.q)
    finite = bool(np.all(np.isfinite(q)))
    values = run.quantities
    p, am = values["linear_momentum"], values["angular_momentum"]
    energy = values["kinetic_energy"] + values["potential_energy"]
    base_position = np.asarray(trajectory.states.base_position)
    lines = [
        f"simulated {model.name} ({n} joints, {jnp.dtype(dtype).name}): {steps} {integrator} steps of {args.dt} s "
        f"({steps * args.dt:g} s), controller {args.controller}",
        f"  wall time {wall:.2f} s (compilation included)",
        f"  final q [rad|m]: {np.array2string(q[-1], precision=4)}",
    ]
    if target is not None:
        lines.append(
            f"  target  [rad|m]: {np.array2string(target, precision=4)}  (largest error {np.max(np.abs(q[-1] - target)):.3g})"
        )
    lines += [
        f"  base moved {np.linalg.norm(base_position[-1] - base_position[0]):.4g} m; {_momentum_change(model, p, am)}; "
        f"energy {energy[0]:.4g} -> {energy[-1]:.4g} J",
        f"  wrote {out}" + ("" if finite else "  (WARNING: the state became non-finite: diverged; try a smaller --dt)"),
    ]
    print("\n".join(lines))
    return 0 if finite else 1


# ------------------------------------------------------------------------------------------
# plot


def _check_output_name(path: str, option: str, *, file: bool) -> None:
    """Refuse (before any work) an output path that names no output whatever is on disk
    (``cli_jobs.output_name_problem``: an empty path; for a ``file``, one ending in a separator)."""
    problem = output_name_problem(path, file=file)
    if problem:
        raise UsageError(f"{option} {path!r}: {problem}")


def _check_output_file(path: str, force: bool, option: str) -> None:
    """Refuse (before any work) an output file that cannot be written: an empty path or one
    ending in a separator, its directory missing or not writable, the path a directory, or an
    existing file without ``--force``."""
    _check_output_name(path, option, file=True)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise CommandError(f"{option} {path}: directory {directory} does not exist")
    if os.path.isdir(path):
        raise CommandError(f"{option} {path}: is a directory")
    if os.path.exists(path) and not force:
        raise CommandError(f"{option} {path}: exists; pass --force to overwrite it")
    reason = unwritable(directory)
    if reason:
        raise CommandError(f"{option} {path}: cannot write in {directory} ({reason})")


def _plot(args: argparse.Namespace) -> int:
    if args.animate is not None and os.path.splitext(args.animate)[1].lower() not in (".gif", ".mp4"):
        raise UsageError(f"--animate {args.animate}: the file must end in .gif or .mp4")
    try:
        import matplotlib
    except ImportError:
        raise CommandError("plotting needs matplotlib (pip install matplotlib)") from None
    matplotlib.use("Agg")
    _setup_jax(False)
    from sdjax import plotting
    from sdjax.simulation import load_run

    run = load_run(args.run)
    out = args.out if args.out is not None else os.path.splitext(args.run)[0] + "_plots"
    _check_output_name(out, "--out", file=False)
    # Every output checked before drawing any: nothing overwritten without --force.
    if os.path.exists(out) and not os.path.isdir(out):
        raise CommandError(f"--out {out}: exists and is not a directory")
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise CommandError(f"--out {out}: directory {parent} does not exist")
    for name in plotting.TIME_HISTORIES:
        existing = os.path.join(out, f"{name}.png")
        if os.path.exists(existing) and not args.force:
            raise CommandError(f"--out {out}: {existing} exists; pass --force to overwrite it")
    if args.animate is not None:
        _check_output_file(args.animate, args.force, "--animate")
    reason = unwritable(out)
    if reason:
        raise CommandError(f"--out {out}: cannot write there ({reason})")
    paths = plotting.save_time_histories(run.model, run.trajectory, out, run.quantities, dpi=args.dpi)
    if args.animate is not None:
        paths.append(
            plotting.animate(
                run.model, run.trajectory, args.animate, fps=args.fps, speed=args.speed, max_frames=args.max_frames
            )
        )
    print(f"{run.model.name}: {run.num_steps} steps; wrote")
    print("\n".join(f"  {p}" for p in paths))
    return 0


# ------------------------------------------------------------------------------------------
# view


def _view(args: argparse.Namespace) -> int:
    _setup_jax(False)
    from sdjax.simulation import load_run

    try:
        from sdjax import viewer

        viewer.server.import_viser()
    except ImportError as err:
        raise CommandError(str(err)) from None
    options = _reader_options(args)
    if options and args.model is None:
        raise UsageError(
            "--base, --inertia-check, --gravity, --end-points and --mimic apply to --model (a run file carries its model)"
        )
    runs = [load_run(path) for path in args.runs]
    if args.model is not None:
        model = _load_model(args.model, options=options)
        for path, run in zip(args.runs, runs):
            found = run.model.num_joints
            if found != model.num_joints:
                raise CommandError(
                    f"{path}: the run has {found} joint coordinates, but --model {args.model} has {model.num_joints} joints"
                )
        models = [model] * len(runs)
    else:
        models = [run.model for run in runs]
    if args.package_dir and args.model is None:
        raise UsageError("--package-dir locates the meshes of a URDF --model (a run file carries no visual geometry)")
    if args.model is not None and not args.no_meshes and os.path.isfile(args.model):
        from sdjax.io.visuals import load_visuals

        visuals = load_visuals(args.model, package_dirs=args.package_dir or (), **options)
    else:
        visuals = ()
    stems = [os.path.splitext(os.path.basename(path))[0] for path in args.runs]
    labels = stems if len(set(stems)) == len(stems) else list(args.runs)
    shown = viewer.show(
        models, [run.trajectory for run in runs], labels=labels, momentum=args.momentum,
        port=args.port, host=args.host, open_browser=not args.no_browser, title=models[0].name, visuals=visuals or None,
    )  # fmt: skip
    drawn = sum(len(robot.shape_nodes) for robot in shown._robots[:1])
    shapes = f", {drawn} of {len(visuals)} visual shapes drawn" if visuals else ""
    try:  # (the banner inside: a Ctrl-C as soon as it is read still closes the server)
        print(
            f"sdjax view: {', '.join(labels)} ({models[0].name}, {runs[0].num_steps} steps{shapes}) at {shown.url}; "
            "Ctrl-C stops",
            flush=True,
        )
        shown.wait()
    except KeyboardInterrupt:
        pass
    finally:
        shown.close()
    return 0


# ------------------------------------------------------------------------------------------
# The parser.


def _add_reader_options(command: argparse.ArgumentParser) -> None:
    """The model reader's options (``sdjax.io.loader.load_model``) on a command."""
    group = command.add_argument_group("model options")
    group.add_argument(
        "--base", choices=("floating", "planar", "fixed"), help="base mode (default: the file's; URDF: from its root)"
    )
    group.add_argument(
        "--inertia-check",
        choices=("physical", "positive_definite"),
        help="inertia tensors accepted: physical (triangle inequality) or positive_definite (SpaceDyn's rule)",
    )
    group.add_argument(
        "--gravity", type=_numbers, nargs="+", metavar="G", help="gravity, inertial frame, m/s^2 (3 values)"
    )
    group.add_argument(
        "--end-points", nargs="+", metavar="LINK", help="URDF links whose frames are the end points, in order"
    )
    group.add_argument(
        "--mimic",
        choices=("coordinates", "refuse"),
        help="URDF <mimic> joints: mimic joints of the model (default: coordinates) or refuse the file",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``sdjax`` argument parser (errors raise :class:`UsageError`)."""
    from sdjax.models import BUILTIN_MODELS

    builtin = ", ".join(sorted(BUILTIN_MODELS))
    parser = _Parser(prog="sdjax", description="Differentiable dynamics of space and mobile robots.")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="{demo,info,simulate,plot,view,plan,identify,montecarlo,kernels}"
    )
    demo = commands.add_parser("demo", help="simulate a built-in free-floating robot and print a summary")
    demo.add_argument("--model", choices=sorted(BUILTIN_MODELS), default="spacedyn_sample")
    demo.add_argument("--duration", type=_positive, default=20.0, help="simulated time, s (default 20)")
    demo.add_argument("--dt", type=_positive, default=0.01, help="RK4 step, s (default 0.01)")
    demo.add_argument("--float32", action="store_true", help="single precision (default float64)")

    model_help = f"a built-in model ({builtin}) or a model file (.json, ...)"
    info = commands.add_parser("info", help="describe a model: tree, masses, end points, checks")
    info.add_argument("model", metavar="MODEL", help=model_help)
    _add_reader_options(info)

    sim = commands.add_parser(
        "simulate",
        help="simulate a model and write a run file (.npz)",
        description="Simulate MODEL from rest (or the given initial state) and write a run file "
        "that 'sdjax plot' draws. Vectors are given as separate numbers or comma-separated.",
    )
    sim.add_argument("model", metavar="MODEL", help=model_help)
    _add_reader_options(sim)
    sim.add_argument("--duration", type=_positive, default=10.0, help="simulated time, s (default 10)")
    sim.add_argument("--dt", type=_positive, default=SIMULATE_DT, help=f"integration step, s (default {SIMULATE_DT})")
    sim.add_argument(
        "--integrator",
        choices=("auto", "rk4", "euler", "implicit", "newmark", "simpson", "adaptive"),
        default="auto",
        help="auto (default): rk4, or implicit where stiff passive joints need a step below --dt",
    )
    sim.add_argument(
        "--controller",
        choices=("none", "pd", "computed-torque"),
        default="none",
        help="none (free motion), pd (joint PD, torque gains) or computed-torque (exact model, floating base)",
    )
    sim.add_argument("--target", type=_numbers, nargs="+", metavar="Q", help="joint targets, rad or m (n values)")
    sim.add_argument(
        "--move-time",
        type=_positive,
        metavar="T",
        help="reach the target along a quintic rest-to-rest path of T s (default: a step)",
    )
    sim.add_argument(
        "--bandwidth",
        type=_positive,
        default=1.0,
        metavar="W",
        help="natural frequency of the default gains, rad/s (critical damping; default 1)",
    )
    sim.add_argument(
        "--kp", type=_numbers, nargs="+", help="pd stiffness, N m/rad or N/m (1 or n values; default from --bandwidth)"
    )
    sim.add_argument("--kd", type=_numbers, nargs="+", help="pd damping, N m s/rad or N s/m (1 or n values)")
    sim.add_argument(
        "--initial-q", type=_numbers, nargs="+", metavar="Q", help="initial joint positions (n values; default 0)"
    )
    sim.add_argument(
        "--initial-qd", type=_numbers, nargs="+", metavar="QD", help="initial joint rates (n values; default 0)"
    )
    sim.add_argument(
        "--base-rpy",
        type=_numbers,
        nargs="+",
        metavar="A",
        help="initial base attitude, SpaceDyn RPY angles, rad (3 values)",
    )
    sim.add_argument(
        "--out", default="run.npz", help="run file to write; .npz is appended when missing (default run.npz)"
    )
    sim.add_argument("--force", action="store_true", help="overwrite the --out file if it exists")
    sim.add_argument(
        "--chunk-steps", type=_positive_int, help="steps per compiled chunk (default: equal chunks of at most 1000)"
    )
    sim.add_argument(
        "--no-progress", action="store_true", help="no progress bar (shown when the run has several chunks)"
    )
    sim.add_argument("--float32", action="store_true", help="single precision (default float64)")

    plot = commands.add_parser("plot", help="draw a run file: time histories (PNG) and an optional animation")
    plot.add_argument("run", metavar="RUN", help="run file written by 'sdjax simulate' (.npz)")
    plot.add_argument("--out", help="directory for the PNG files (default: RUN without .npz + '_plots')")
    plot.add_argument(
        "--animate", metavar="FILE", help="also write a 3-D stick-figure animation (.gif, or .mp4 with ffmpeg)"
    )
    plot.add_argument("--fps", type=_positive, default=20.0, help="animation frames per second (default 20)")
    plot.add_argument(
        "--speed", type=_positive, default=1.0, help="simulated seconds per second of animation (default 1)"
    )
    plot.add_argument("--max-frames", type=_positive_int, default=200, help="most animation frames (default 200)")
    plot.add_argument("--dpi", type=_dpi, default=100, help=f"PNG resolution, at most {MAX_DPI} (default 100)")
    plot.add_argument("--force", action="store_true", help="overwrite existing PNG files and the --animate file")

    view = commands.add_parser(
        "view",
        help="show run files in a 3-D viewer in the browser (pip install 'sdjax[viewer]')",
        description="Serve a 3-D view of one or more run files (planned vs executed, several starts) "
        "with a time slider and playback, until Ctrl-C.",
    )
    view.add_argument("runs", nargs="+", metavar="RUN", help="run files written by 'sdjax simulate' (.npz)")
    view.add_argument("--model", metavar="MODEL", help=f"draw with this model instead of the runs' own ({model_help})")
    _add_reader_options(view)
    view.add_argument(
        "--port",
        type=_port,
        default=8080,
        help="preferred port (the next free one is taken if busy; 0: any; default 8080)",
    )
    view.add_argument(
        "--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1; 0.0.0.0 for other machines)"
    )
    view.add_argument("--no-browser", action="store_true", help="do not open a browser (print the URL only)")
    view.add_argument("--momentum", action="store_true", help="show the momentum arrows at start")
    view.add_argument(
        "--no-meshes",
        action="store_true",
        help="draw a URDF/MJCF --model from its inertia (capsules), not its visual geometry",
    )
    view.add_argument("--package-dir", action="append", metavar="DIR",
                      help="folder holding the packages of package:// mesh names (repeatable; searched before ROS_PACKAGE_PATH "
                           "and the URDF file's ancestors)")  # fmt: skip
    kernels = commands.add_parser(
        "kernels",
        help="compile the CPU batch kernels (Numba) ahead of first use, into the on-disk caches",
    )
    kernels.add_argument(
        "--precision", choices=("both", "float64", "float32"), default="both", help="which kernels (default both)"
    )
    for name, (_, help_line) in JOBS.items():
        job = commands.add_parser(name, help=help_line, description=f"{help_line[0].upper()}{help_line[1:]}; "
                                  "the schema is in docs/guide/cli.md, examples in examples/.")  # fmt: skip
        job.add_argument("config", metavar="CONFIG", help="TOML config file")
        job.add_argument("--out", metavar="DIR", help="output directory (default: the config's outputs.directory)")
        job.add_argument("--force", action="store_true", help="overwrite existing outputs")
        job.add_argument("--set", action="append", metavar="KEY=VALUE",
                         help="override one config key (dotted path, TOML value; repeatable), e.g. problem.steps=10")  # fmt: skip
        job.add_argument("--no-progress", action="store_true", help="no progress bar")
        job.add_argument("--float32", action="store_true", help="single precision (default float64)")
    return parser


def _job(args: argparse.Namespace) -> int:
    if args.out is not None:  # (the config's outputs.directory is checked with the config)
        _check_output_name(args.out, "--out", file=False)
    _setup_jax(args.float32)
    return JOBS[args.command][0](args, lambda spec: _load_model(spec, args.float32), MAX_STEPS)


_COMMANDS = {"demo": _demo, "info": _info, "simulate": _simulate, "plot": _plot, "view": _view, "kernels": _kernels}
_COMMANDS.update({name: _job for name in JOBS})


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m sdjax`` and the ``sdjax`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        args.argv = argv
        return _COMMANDS[args.command](args)
    except UsageError as err:
        print(f"sdjax: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except (CommandError, ValueError, OSError) as err:
        print(f"sdjax: error: {_one_line(err)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("sdjax: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # a CLI reports, it does not dump a traceback
        if os.environ.get("SDJAX_DEBUG"):
            raise
        print(
            f"sdjax: error: unexpected {type(err).__name__}: {_one_line(err)} (SDJAX_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
