"""Long simulations in chunks with progress, derived time series, and run files (``.npz``).

:func:`simulate` is :func:`sdjax.rollout` cut into chunks of ``chunk_steps`` steps. Every
chunk is one call of the *same* compiled rollout program (``rollout`` is
``equinox.filter_jit``-compiled; the chunk's start time and state are traced arguments,
so a run of any length compiles once: a shorter last chunk runs the same program and its
extra steps are dropped). A Python loop on the host calls it chunk after chunk and reports
progress (a tqdm bar, or a callback) between calls.

Why a host loop and not one ``lax.scan`` over chunks with a host callback
(``jax.debug.callback`` / ``io_callback``) inside it:

- device memory stays O(chunk): each chunk's states are moved to host memory as soon as it
  finishes, so a run longer than the accelerator's memory still fits;
- progress is exact and ordered, with no callback ordering or effect semantics inside a
  compiled loop (and no callback fired once per batch element under ``vmap``);
- the callback receives the chunk's last state (live monitoring, stopping by exception).

The price is one dispatch per chunk (tens of microseconds), negligible for chunks of
hundreds of steps. To differentiate through a simulation or ``vmap`` it over a batch, use
:func:`sdjax.rollout` directly (one ``lax.scan``); :func:`simulate` returns the same
trajectory, up to floating-point round-off in the time fed to the control law
(``t0 + c dt_chunk + k dt`` vs ``t0 + (c N_chunk + k) dt``).

Run files (:class:`SimulationRun`, ``.npz`` written by ``numpy.savez_compressed``, read with
``allow_pickle=False``), ``N`` steps, ``n`` joints, ``ne`` end points:

============================================  ==========================================
entry                                         content
============================================  ==========================================
``time``                                      ``(N + 1,)`` s
``state/base_position``                       ``(N + 1, 3)`` r0, inertial frame, m
``state/base_quaternion``                     ``(N + 1, 4)`` A0 as (x, y, z, w)
``state/base_linear_velocity``                ``(N + 1, 3)`` v0, inertial frame, m/s
``state/base_angular_velocity``               ``(N + 1, 3)`` w0, inertial frame, rad/s
``state/q``, ``state/qd``                     ``(N + 1, n)`` rad or m, rad/s or m/s
``controls/tau``                              ``(N, n)`` N m or N, held over step k
``controls/base_force``, ``base_torque``      ``(N, 3)`` N, N m, inertial frame
``controls/end_point_force``, ``..._torque``  ``(N, ne, 3)`` N, N m, inertial frame
``quantity/<name>``                           see :func:`trajectory_quantities`
``meta``                                      0-d unicode array holding JSON (below)
============================================  ==========================================

``meta`` = ``{"format": "sdjax.run/1", "model": <the sdjax-model JSON object, see
sdjax.io.json_model>, "dtype": "float64", "quantity_names": [...], "info": {...}}``;
``info`` holds free-form facts about the run (``dt``, ``integrator``, controller,
timings, the command line). The model is embedded, so ``sdjax plot run.npz`` redraws a run
without the model file.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from sdjax._checks import check_count, check_scalar
from sdjax.dynamics import Controls, make_controls
from sdjax.integrate import MAX_ROLLOUT_STEPS, Trajectory, rollout
from sdjax.kinematics import center_of_mass
from sdjax.model import Model
from sdjax.momentum import angular_momentum, kinetic_energy, linear_momentum, potential_energy
from sdjax.state import State, make_state

#: Version of the ``.npz`` layout written by :meth:`SimulationRun.save`.
FILE_FORMAT = "sdjax.run/1"

#: Default number of steps per chunk of :func:`simulate`.
DEFAULT_CHUNK_STEPS = 1000

_STATE_FIELDS = ("base_position", "base_quaternion", "base_linear_velocity", "base_angular_velocity", "q", "qd")
_CONTROL_FIELDS = ("tau", "base_force", "base_torque", "end_point_force", "end_point_torque")

ProgressCallback = Callable[[int, int, State], None]


def _steps_from(dt: Any, num_steps: Any, duration: Any) -> int:
    dt_value = check_scalar("simulate: dt", dt, sign="positive")  # (TypeError for text: "0.01" is no step)
    if (num_steps is None) == (duration is None):
        raise ValueError("simulate: give exactly one of num_steps and duration")
    if duration is not None:
        duration = check_scalar("simulate: duration", duration, sign="non-negative")
        if not duration / dt_value <= MAX_ROLLOUT_STEPS:  # (before round(): 1e300 / 1e-10 is inf)
            raise ValueError(
                f"simulate: duration / dt = {duration / dt_value:.3g} steps exceeds the longest rollout ({MAX_ROLLOUT_STEPS})"
            )
        return int(round(duration / dt_value))
    return check_count("simulate: num_steps", num_steps, 0)


def simulate(
    model: Model,
    initial_state: State,
    dt: Any,
    num_steps: int | None = None,
    control: Any = None,
    *,
    duration: Any = None,
    chunk_steps: int | None = None,
    progress: bool | ProgressCallback = False,
    integrator: Any = "rk4",
    t0: Any = 0.0,
    check: bool = False,
    **rollout_options: Any,
) -> Trajectory:
    """Simulate like :func:`sdjax.rollout`, in chunks, reporting progress after each chunk.

    Arguments:
        model: the system.
        initial_state: state at ``t0``.
        dt: step, s (positive).
        num_steps: number of steps ``N``; or give ``duration`` instead.
        control: as :func:`sdjax.rollout`: ``None``, a law ``(t, state) -> tau | Controls``
            (held over each step), an ``(N, n)`` torque sequence or a :class:`Controls`
            with leading axis ``N`` (cut into chunks here).
        duration: simulated time, s; ``N = round(duration / dt)``.
        chunk_steps: steps per compiled call (default: ``N`` cut into equal chunks of at
            most 1000). The last chunk runs the same program (its extra steps are computed
            and dropped; with ``check=True`` it is run at its exact length instead).
        progress: ``True`` for a tqdm progress bar (on stderr), ``False`` for none, or a
            callable ``progress(steps_done, N, state)`` called after each chunk with the
            chunk's last :class:`State`.
        integrator: an :class:`sdjax.Integrator` or its name (``"rk4"``, ``"euler"``,
            ``"implicit"``, ``"newmark"``, ``"simpson"``, ``"adaptive"``; see :func:`sdjax.rollout`).
        t0: initial time, s.
        check: fail if a state becomes non-finite (see :func:`sdjax.rollout`).
        rollout_options: further keyword arguments of :func:`sdjax.rollout`.

    Returns:
        :class:`~sdjax.Trajectory` with ``N + 1`` states and ``N`` controls, equal to
        ``rollout(model, initial_state, dt, N, control, ...)`` up to round-off.
    """
    num_steps = _steps_from(dt, num_steps, duration)
    if chunk_steps is None:
        # Equal chunks of at most DEFAULT_CHUNK_STEPS: little padding in the last one.
        chunk = -(-num_steps // max(1, -(-num_steps // DEFAULT_CHUNK_STEPS))) if num_steps else 1
    else:
        chunk = check_count("simulate: chunk_steps", chunk_steps, 1)
    if not (isinstance(progress, bool) or callable(progress)):
        raise TypeError(f"simulate: progress: expected True, False or a callable, got {progress!r}")
    dtype = initial_state.q.dtype
    sequence = None if control is None or callable(control) else control
    if sequence is not None:
        sequence = sequence if isinstance(sequence, Controls) else jnp.asarray(sequence)
        leaves = jax.tree.leaves(sequence)
        if not leaves or leaves[0].shape[:1] != (num_steps,):
            shape = leaves[0].shape if leaves else None
            raise ValueError(
                f"simulate: control sequence must have a leading axis of num_steps={num_steps}, got shape {shape}"
            )
    options = dict(integrator=integrator, check=check, **rollout_options)
    t0 = jnp.asarray(t0, dtype)
    dt_array = jnp.asarray(dt, dtype)
    if num_steps == 0:
        return rollout(model, initial_state, dt, 0, control, t0=t0, **options)

    bar = None
    if progress is True:
        from tqdm import tqdm

        bar = tqdm(total=num_steps, desc=f"simulate {model.name}", unit="step")
    states: list[State] = []
    controls: list[Controls] = []
    state = initial_state
    done = 0
    try:
        while done < num_steps:
            steps = min(chunk, num_steps - done)
            # The last chunk runs the full-chunk program too (one compilation in all) and its
            # extra steps are dropped; with check=True it runs exactly, so that a failure
            # past the end cannot be reported.
            run_steps = steps if check else chunk
            # A traced start time: every chunk reuses one compiled program.
            start = t0 + jnp.asarray(done, dtype) * dt_array
            part = (
                control
                if sequence is None
                else jax.tree.map(lambda x: _pad(x[done : done + steps], run_steps), sequence)
            )
            traj = rollout(model, state, dt, run_steps, part, t0=start, **options)
            state = jax.tree.map(lambda x: x[steps], traj.states)
            # Move the chunk to host memory: device memory stays O(chunk).
            states.append(jax.device_get(jax.tree.map(lambda x: x[1 : steps + 1], traj.states)))
            controls.append(jax.device_get(jax.tree.map(lambda x: x[:steps], traj.controls)))
            done += steps
            if bar is not None:
                bar.update(steps)
            elif callable(progress) and not isinstance(progress, bool):
                progress(done, num_steps, state)
    finally:
        if bar is not None:
            bar.close()
    first = jax.device_get(initial_state)
    history = jax.tree.map(lambda x0, *xs: jnp.asarray(np.concatenate([np.asarray(x0)[None], *xs])), first, *states)
    applied = jax.tree.map(lambda *xs: jnp.asarray(np.concatenate(xs)), *controls)
    time = t0 + jnp.arange(num_steps + 1, dtype=dtype) * dt_array
    return Trajectory(time=time, states=history, controls=applied)


def _pad(x: jax.Array, length: int) -> jax.Array:
    """``x`` extended with zeros along its leading axis to ``length``."""
    return jnp.concatenate([x, jnp.zeros((length - x.shape[0],) + x.shape[1:], x.dtype)]) if x.shape[0] < length else x


# ------------------------------------------------------------------------------------------
# Derived time series.


@eqx.filter_jit
def _quantities(model: Model, states: State) -> dict[str, jax.Array]:
    def one(state):
        return {
            "linear_momentum": linear_momentum(model, state),
            "angular_momentum": angular_momentum(model, state),
            "kinetic_energy": kinetic_energy(model, state),
            "potential_energy": potential_energy(model, state),
            "center_of_mass": center_of_mass(model, state),
        }

    return jax.vmap(one)(states)


def trajectory_quantities(model: Model, trajectory: Trajectory) -> dict[str, np.ndarray]:
    """Momenta, energies and the centre of mass along a trajectory (host NumPy arrays).

    Computed by :mod:`sdjax.momentum` and :func:`sdjax.center_of_mass` at every state; the
    actuator work adds up what the joint forces held over each step did.

    Arguments:
        model: the system.
        trajectory: ``N + 1`` states, ``N`` controls.

    Returns:
        ``{name: array}`` with

        - ``linear_momentum`` ``(N + 1, 3)`` kg m/s, inertial frame;
        - ``angular_momentum`` ``(N + 1, 3)`` kg m^2/s, about the inertial origin;
        - ``kinetic_energy``, ``potential_energy`` ``(N + 1,)`` J (potential zero at the
          inertial origin);
        - ``center_of_mass`` ``(N + 1, 3)`` m;
        - ``joint_work`` ``(N + 1,)`` J: ``sum_k tau_k . (q_{k+1} - q_k)``, the work of the
          joint torques/forces held constant over each step (exact for a zero-order hold);
          without base or end-point forces, gravity or passive joints it equals the change
          of ``kinetic + potential`` energy up to the integrator's error.
    """
    values = jax.device_get(_quantities(model, trajectory.states))
    out = {k: np.asarray(v) for k, v in values.items()}
    q = np.asarray(trajectory.states.q)
    tau = np.asarray(trajectory.controls.tau)
    step_work = np.sum(tau * np.diff(q, axis=0), axis=-1)
    out["joint_work"] = np.concatenate([np.zeros(1, step_work.dtype), np.cumsum(step_work)])
    return out


# ------------------------------------------------------------------------------------------
# Run files.


class SimulationRun:
    """A simulated run: model, trajectory, derived quantities and facts; ``.npz`` save/load.

    Attributes:
        model: the :class:`~sdjax.Model`.
        trajectory: the :class:`~sdjax.Trajectory` (``N + 1`` states, ``N`` controls).
        quantities: ``{name: NumPy array}`` (:func:`trajectory_quantities`; computed when
            not given).
        info: JSON-serialisable facts (``dt``, ``integrator``, controller, timings, ...).

    File layout: see the module docstring (:mod:`sdjax.simulation`).
    """

    def __init__(
        self,
        model: Model,
        trajectory: Trajectory,
        quantities: Mapping[str, Any] | None = None,
        info: Mapping[str, Any] | None = None,
    ):
        self.model = model
        self.trajectory = trajectory
        self.quantities = (
            trajectory_quantities(model, trajectory)
            if quantities is None
            else {k: np.asarray(v) for k, v in quantities.items()}
        )
        self.info = dict(info or {})

    @property
    def num_steps(self) -> int:
        return int(np.shape(self.trajectory.time)[0]) - 1

    def save(self, path: str | os.PathLike) -> None:
        """Write the run as ``.npz`` (layout in the module docstring)."""
        from sdjax.io.json_model import model_to_dict

        meta = {
            "format": FILE_FORMAT,
            "model": model_to_dict(self.model),
            "dtype": str(np.dtype(self.model.dtype)),
            "quantity_names": list(self.quantities),
            "info": self.info,
        }
        arrays: dict[str, np.ndarray] = {"time": np.asarray(self.trajectory.time)}
        arrays.update({f"state/{f}": np.asarray(getattr(self.trajectory.states, f)) for f in _STATE_FIELDS})
        arrays.update({f"controls/{f}": np.asarray(getattr(self.trajectory.controls, f)) for f in _CONTROL_FIELDS})
        arrays.update({f"quantity/{k}": v for k, v in self.quantities.items()})
        arrays["meta"] = np.array(json.dumps(meta))
        # (mypy: a key could be savez_compressed's bool allow_pickle; none of these names is.)
        np.savez_compressed(path, **arrays)  # type: ignore[arg-type]

    @classmethod
    def load(cls, path: str | os.PathLike) -> SimulationRun:
        """Read a file written by :meth:`save` (no pickles are loaded).

        Raises:
            ValueError: the file is missing, not an ``.npz`` run file, of another format
                version, or inconsistent (array shapes that do not match the model, an entry
                that ``meta`` does not list).
        """
        from sdjax.io.json_model import model_from_dict
        from sdjax.io.npz import NpzArchive

        with NpzArchive(path, "sdjax run file") as data:
            name, meta = data.name, data.meta(FILE_FORMAT)
            if not isinstance(meta.get("model"), dict):
                raise ValueError(f"{name}: 'meta' holds no model")
            if meta.get("dtype", "float64") not in ("float32", "float64"):
                raise ValueError(f"{name}: 'meta' dtype must be 'float32' or 'float64', got {meta.get('dtype')!r}")
            dtype = np.dtype(meta.get("dtype", "float64"))
            model = model_from_dict(meta["model"], dtype=dtype)
            needed = ["time"] + [f"state/{f}" for f in _STATE_FIELDS] + [f"controls/{f}" for f in _CONTROL_FIELDS]
            missing = [k for k in needed if k not in data]
            if missing:
                raise ValueError(f"{name}: missing entries {missing}")
            time = data.array("time", (None,), kinds="f")
            if time.shape[0] == 0:
                raise ValueError(f"{name}: 'time' holds no samples")
            if not np.all(np.isfinite(time)) or not np.all(np.diff(time) > 0):
                raise ValueError(f"{name}: 'time' must be finite and strictly increasing")
            steps = time.shape[0] - 1
            n, ne = model.num_joints, model.num_end_points
            expected = dict(
                base_position=(steps + 1, 3),
                base_quaternion=(steps + 1, 4),
                base_linear_velocity=(steps + 1, 3),
                base_angular_velocity=(steps + 1, 3),
                q=(steps + 1, n),
                qd=(steps + 1, n),
                tau=(steps, n),
                base_force=(steps, 3),
                base_torque=(steps, 3),
                end_point_force=(steps, ne, 3),
                end_point_torque=(steps, ne, 3),
            )
            arrays = {}
            for group, fields in (("state", _STATE_FIELDS), ("controls", _CONTROL_FIELDS)):
                for f in fields:  # shapes checked from the headers before anything is read
                    arrays[f] = data.array(f"{group}/{f}", expected[f], kinds="f")
            groups = {f: "state" for f in _STATE_FIELDS} | {f: "controls" for f in _CONTROL_FIELDS}
            for entry, array in [("time", time)] + [(f"{groups[k]}/{k}", v) for k, v in arrays.items()]:
                if array.dtype != dtype:  # (one precision: mixed ones fail later, far from the file)
                    raise ValueError(f"{name}: entry {entry!r} is {array.dtype}, but 'meta' says the run is {dtype}")
            norms = np.linalg.norm(arrays["base_quaternion"], axis=-1)
            if np.any(norms == 0):  # (NaN rows of a diverged run are kept; a zero row is no attitude)
                raise ValueError(f"{name}: 'state/base_quaternion' has a zero row (step {int(np.argmax(norms == 0))})")
            names = meta.get("quantity_names", [])
            if not isinstance(names, list) or not all(isinstance(k, str) for k in names):
                raise ValueError(f"{name}: 'meta' quantity_names must be a list of names")
            repeated = sorted(k for k, count in collections.Counter(names).items() if count > 1)
            if repeated:
                raise ValueError(f"{name}: 'meta' quantity_names lists {repeated} more than once")
            absent = [k for k in names if f"quantity/{k}" not in data]
            if absent:
                raise ValueError(f"{name}: 'meta' lists quantities {absent} that the file does not hold")
            unlisted = sorted(set(data.entries) - {"meta", *needed} - {f"quantity/{k}" for k in names})
            if unlisted:
                raise ValueError(f"{name}: entries {unlisted} are not listed in 'meta' quantity_names (or unknown)")
            quantities = {k: data.array(f"quantity/{k}", kinds="f", leading=steps + 1) for k in names}
            info = meta.get("info", {})
            if not isinstance(info, dict):
                raise ValueError(f"{name}: 'meta' info must be a JSON object, got {info!r}")
        states = _stacked(make_state(model), {f: arrays[f] for f in _STATE_FIELDS})
        controls = _stacked(make_controls(model), {f: arrays[f] for f in _CONTROL_FIELDS})
        trajectory = Trajectory(time=jnp.asarray(time), states=states, controls=controls)
        return cls(model, trajectory, quantities or None, info)

    def __repr__(self) -> str:
        return (
            f"SimulationRun(model={self.model.name!r}, num_steps={self.num_steps}, quantities={list(self.quantities)})"
        )


def _stacked(template: Any, fields: Mapping[str, np.ndarray]) -> Any:
    """A :class:`State`/:class:`Controls` with a leading time axis on every field (built by
    tree unflattening: their constructors check single, unbatched values)."""
    names = [f.name for f in dataclasses.fields(template)]
    return jax.tree.unflatten(jax.tree.structure(template), [jnp.asarray(fields[k]) for k in names])


def load_run(path: str | os.PathLike) -> SimulationRun:
    """Read a run file written by :meth:`SimulationRun.save` (see :meth:`SimulationRun.load`)."""
    return SimulationRun.load(path)


__all__ = ["FILE_FORMAT", "SimulationRun", "load_run", "simulate", "trajectory_quantities"]
