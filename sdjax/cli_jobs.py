"""The command line's three jobs driven by a TOML file: ``sdjax {plan,identify,montecarlo}``.

::

    sdjax plan CONFIG.toml [--out DIR] [--force] [--set KEY=VALUE ...] [--no-progress]
    sdjax identify CONFIG.toml [...]
    sdjax montecarlo CONFIG.toml [...]

Each config names the model (a built-in name or a model file, relative to the config's folder),
the problem and the outputs (``[outputs] directory``, overridden by ``--out``). The file is
validated before anything runs: an unknown key, a wrong type, a missing required key or an
impossible value is refused with one line naming the file and the dotted key
(``plan.toml: problem.duration: expected a positive number, got -1``); sizes are capped before
allocation (``MAX_STEPS`` of ``sdjax.cli``). ``--set problem.steps=10`` overrides one key (the
value is a TOML value). The outputs are checked before the run and never overwritten without
``--force``. The schema of each job is documented in ``docs/guide/cli.md`` and shown by the
examples in ``examples/``.

The logic is the library's (``sdjax.planning``, ``sdjax.identification``,
``sdjax.montecarlo``); this module reads the file, calls it, writes the files.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["ConfigError", "JOBS", "MAX_SAMPLES", "identify_job", "montecarlo_job", "plan_job", "read_config"]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found, no-redef, unused-ignore]

#: Most Monte-Carlo samples one ``sdjax montecarlo`` run may draw.
MAX_SAMPLES = 10_000_000

_REQUIRED: Any = object()


class ConfigError(ValueError):
    """A config file refused (exit status 1): the message names the file and the key."""


# ------------------------------------------------------------------------------------------
# Reading and validating a config.


class _Table:
    """One TOML table being read: every read key is remembered, :meth:`done` refuses the rest."""

    def __init__(self, path: str, data: dict, prefix: str = ""):
        self.path, self.data, self.prefix = path, data, prefix
        self.used: set[str] = set()

    def fail(self, key: str, what: str) -> ConfigError:
        return ConfigError(f"{self.path}: {self.prefix}{key}: {what}")

    def has(self, key: str) -> bool:
        return key in self.data

    def _get(self, key: str, default: Any) -> Any:
        self.used.add(key)
        if key not in self.data:
            if default is _REQUIRED:
                raise self.fail(key, "missing required key")
            return default
        return self.data[key]

    def table(self, key: str) -> _Table:
        value = self._get(key, {})
        if not isinstance(value, dict):
            raise self.fail(key, f"expected a table [{self.prefix}{key}], got {_kind(value)}")
        return _Table(self.path, value, f"{self.prefix}{key}.")

    def number(self, key: str, default: Any = _REQUIRED, *, sign: str = "", maximum: float | None = None) -> Any:
        value = self._get(key, default)
        if value is default and key not in self.data:
            return value
        return self._scalar(key, value, sign, maximum)

    def _scalar(self, key: str, value: Any, sign: str, maximum: float | None) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(key, f"expected a number, got {_kind(value)}")
        try:
            value = float(value)
        except OverflowError:  # (an integer beyond the largest float)
            raise self.fail(key, f"expected a finite number, got an integer of about {_digits(value)} digits") from None
        if not math.isfinite(value):
            raise self.fail(key, f"expected a finite number, got {value}")
        if sign == "positive" and not value > 0:
            raise self.fail(key, f"expected a positive number, got {value:g}")
        if sign == "non-negative" and not value >= 0:
            raise self.fail(key, f"expected a non-negative number, got {value:g}")
        if maximum is not None and value > maximum:
            raise self.fail(key, f"expected at most {maximum:g}, got {value:g}")
        return value

    def integer(self, key: str, default: Any = _REQUIRED, *, minimum: int = 1, maximum: int | None = None) -> Any:
        value = self._get(key, default)
        if value is default and key not in self.data:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"expected an integer, got {_kind(value)}")
        if abs(value) > _LARGEST_INTEGER:  # (the int64 range every count and seed is used in)
            raise self.fail(
                key, f"expected an integer within +-{_LARGEST_INTEGER}, got one of about {_digits(value)} digits"
            )
        if value < minimum:
            raise self.fail(key, f"expected an integer >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise self.fail(key, f"expected at most {maximum}, got {value}")
        return value

    def string(self, key: str, default: Any = _REQUIRED, *, choices: tuple[str, ...] | None = None) -> Any:
        value = self._get(key, default)
        if value is default and key not in self.data:
            return value
        if not isinstance(value, str):
            raise self.fail(key, f"expected a string, got {_kind(value)}")
        if choices is not None and value not in choices:
            raise self.fail(key, f"expected one of {', '.join(choices)}, got {value!r}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self._get(key, default)
        if not isinstance(value, bool):
            raise self.fail(key, f"expected true or false, got {_kind(value)}")
        return value

    def vector(
        self, key: str, default: Any = _REQUIRED, *, size: int | None = None, scalar: bool = False, sign: str = ""
    ) -> Any:
        """A list of numbers (``size`` of them; a single number too when ``scalar``)."""
        value = self._get(key, default)
        if value is default and key not in self.data:
            return value
        if scalar and not isinstance(value, list):
            self._scalar(key, value, sign, None)
            return np.full(size or 1, float(value))
        if not isinstance(value, list):
            raise self.fail(key, f"expected a list of numbers, got {_kind(value)}")
        if size is not None and len(value) != size:
            raise self.fail(key, f"expected {'1 or ' if scalar else ''}{size} values, got {len(value)}")
        return np.asarray([self._scalar(f"{key}[{i}]", v, sign, None) for i, v in enumerate(value)])

    def matrix3(self, key: str, default: Any = _REQUIRED) -> Any:
        value = self._get(key, default)
        if value is default and key not in self.data:
            return value
        if not isinstance(value, list) or len(value) != 3 or any(not isinstance(r, list) or len(r) != 3 for r in value):
            raise self.fail(key, "expected a 3 x 3 matrix (three rows of three numbers)")
        return np.asarray(
            [[self._scalar(f"{key}[{i}][{j}]", v, "", None) for j, v in enumerate(r)] for i, r in enumerate(value)]
        )

    def rows(self, key: str, width: int, default: Any = _REQUIRED, *, allow_empty: bool = False) -> Any:
        """A list of rows of ``width`` numbers each, as a ``(rows, width)`` array (``[]`` too with
        ``allow_empty``)."""
        value = self._get(key, default)
        if value is default and key not in self.data:
            return value
        if allow_empty and value == []:
            return np.zeros((0, width))
        if not isinstance(value, list) or not value or any(not isinstance(r, list) or len(r) != width for r in value):
            raise self.fail(key, f"expected a list of rows of {width} numbers, e.g. [[{', '.join(['0'] * width)}]]")
        return np.asarray(
            [[self._scalar(f"{key}[{i}][{j}]", v, "", None) for j, v in enumerate(r)] for i, r in enumerate(value)]
        )

    def done(self) -> None:
        unknown = [key for key in self.data if key not in self.used]
        if unknown:
            allowed = ", ".join(sorted(self.used)) or "none"
            raise self.fail(unknown[0], f"unknown key (expected one of: {allowed})")


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"


#: Largest config file read (a job's settings take a few kB; its data are other files).
MAX_CONFIG_BYTES = 1024 * 1024
#: Largest integer a config holds (int64: seeds, counts; larger TOML integers are refused).
_LARGEST_INTEGER = 2**63 - 1


def _digits(value: int) -> int:
    """About the number of decimal digits of ``value`` (without printing it: Python refuses to
    print integers of more than 4300 digits)."""
    return int(abs(value).bit_length() * math.log10(2)) + 1


def duration_steps(
    duration: float, dt: float, max_steps: int, duration_name: str = "duration", dt_name: str = "dt"
) -> int:
    """``duration / dt`` as a whole number of integration steps, 1 to ``max_steps``: the one rule of
    every command that turns a duration into a step count (``demo``, ``simulate``, ``identify``).
    ``ValueError`` (its message names the two settings as ``duration_name`` and ``dt_name``) for a
    duration or step that is not positive and finite, a step longer than the duration, more than
    ``max_steps`` steps (an infinite ratio too), or a duration that is not a whole number of steps
    to 1e-9 of a step (the run would end at another time than asked, and report the asked one)."""
    for name, value in ((duration_name, duration), (dt_name, dt)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name}: expected a positive finite number, got {value!r}")
    if not dt <= duration:
        raise ValueError(f"need {dt_name} <= {duration_name}, got {dt_name} {dt:g}, {duration_name} {duration:g}")
    ratio = duration / dt
    if not ratio <= max_steps:  # (inf too: 1e300 / 1e-10)
        raise ValueError(
            f"{duration_name} / {dt_name} = {ratio:.3g} steps exceeds the limit of {max_steps} steps; "
            f"use a larger {dt_name} or a shorter {duration_name}"
        )
    steps = int(round(ratio))
    if abs(ratio - steps) > 1e-9 * max(ratio, 1.0):
        raise ValueError(
            f"{duration_name} {duration:g} is not a whole number of {dt_name} {dt:g} steps ({ratio:.4g}); "
            f"the run would end at {steps * dt:g} s"
        )
    return steps


def _apply_override(path: str, data: dict, item: str) -> None:
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {item}: expected KEY=VALUE (e.g. problem.steps=10)")
    if "\n" in key or "\r" in key:
        raise ConfigError(f"--set {key!r}: the key holds a line break; give one KEY=VALUE per --set")
    try:
        parsed = tomllib.loads(f"v = {text}")
    except tomllib.TOMLDecodeError:
        raise ConfigError(f"--set {item}: {text!r} is not a TOML value (strings need quotes)") from None
    except RecursionError:
        raise ConfigError(f"--set {key}: the value is nested too deeply to read") from None
    if set(parsed) != {"v"}:  # (a line break, then more TOML: it would set other keys, or be dropped)
        extra = ", ".join(k for k in parsed if k != "v")
        raise ConfigError(
            f"--set {key}: the value goes on past a line break to set {extra}; give one KEY=VALUE per --set"
        )
    value = parsed["v"]
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{path}: --set {key}: {part} is not a table")
    node[parts[-1]] = value


def read_config(path: str, overrides: Sequence[str] = ()) -> _Table:
    """The top table of a TOML config, with ``--set KEY=VALUE`` overrides applied."""
    if not os.path.isfile(path):
        raise ConfigError(f"{path}: no such config file")
    if os.path.getsize(path) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: {os.path.getsize(path)} bytes exceeds the config size limit of {MAX_CONFIG_BYTES}")
    try:
        with open(path, "rb") as f:
            raw = f.read()
        data = tomllib.loads(raw.removeprefix(b"\xef\xbb\xbf").decode("utf-8"))  # (a byte-order mark skipped)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not readable TOML: arrays or tables nested too deeply") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not valid TOML: not UTF-8 text") from None
    for item in overrides:
        _apply_override(path, data, item)
    return _Table(path, data)


# ------------------------------------------------------------------------------------------
# Shared set-up.


def _model(config: _Table, load_model: Callable[[str], Any]):
    spec = config.string("model")
    if not os.path.isabs(spec):
        beside = os.path.join(os.path.dirname(os.path.abspath(config.path)), spec)
        if os.path.isfile(beside):
            spec = beside
    return load_model(spec)


def _outputs(
    config: _Table, args: argparse.Namespace, names: list[str], *, parquet: bool = False
) -> tuple[str, bool, bool]:
    """The output directory (checked: parent exists, no output overwritten without --force),
    whether to draw plots and, for a job with ``parquet=True`` (``outputs.parquet``, default:
    whether pyarrow is importable), whether to write the ``.parquet`` outputs of ``names``."""
    out = config.table("outputs")
    default = os.path.splitext(os.path.basename(config.path))[0] + "_out"
    directory = args.out if args.out is not None else out.string("directory", default)
    if args.out is not None:
        out.used.add("directory")
    plots = out.boolean("plots", True)
    if parquet:
        import importlib.util

        available = importlib.util.find_spec("pyarrow") is not None
        parquet = out.boolean("parquet", available)
        if parquet and not available:
            raise out.fail("parquet", 'needs pyarrow (pip install "sdjax[data]"; or outputs.parquet = false)')
    out.done()
    problem = output_name_problem(directory, file=False)  # (--out: refused by the command line first)
    if problem:
        raise out.fail("directory", problem)
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise ConfigError(f"{directory}: exists and is not a directory")
    parent = os.path.dirname(os.path.abspath(directory))
    if not os.path.isdir(parent):
        raise ConfigError(f"{directory}: directory {parent} does not exist")
    if plots:
        try:
            import matplotlib

            matplotlib.use("Agg")
        except ImportError:
            raise ConfigError("plots need matplotlib (pip install matplotlib; or outputs.plots = false)") from None
    for name in names:
        if (name.endswith(".png") and not plots) or (name.endswith(".parquet") and not parquet):
            continue
        target = os.path.join(directory, name)
        if os.path.exists(target) and not args.force:
            raise ConfigError(f"{target}: exists; pass --force to overwrite it")
    reason = unwritable(directory)
    if reason:
        raise ConfigError(f"{directory}: cannot write the outputs there ({reason})")
    return directory, plots, parquet


def output_name_problem(path: str, *, file: bool) -> str:
    """What is wrong with the text ``path`` as the name of an output, whatever is on disk, or
    ``""``: the check every command makes of its output paths before any work (``file``: the
    path of one file, else of the directory the outputs go in; what is on disk is checked next,
    by the caller). An empty path names nothing (the write would fail only after the run, or a
    file become the hidden ``.npz``); a file's path cannot end in a path separator (``sub/``
    would become ``sub/.npz``)."""
    if not path:
        return f"an empty path; name {'a file' if file else 'a directory'}"
    if file and path.endswith(tuple(sep for sep in (os.sep, os.altsep) if sep)):
        return "ends in a path separator (names a directory); name a file in it"
    return ""


def unwritable(directory: str) -> str:
    """Why files cannot be written into ``directory``, or made there when it does not exist yet
    (then its parent is tried, which must exist); ``""`` when they can. Checked by writing and
    removing a probe file, so that a job refuses before it runs rather than after (permission
    bits alone do not tell: root passes them, and a pseudo-filesystem such as ``/proc`` refuses
    anyway); nothing is left behind."""
    if not os.path.isdir(directory):
        directory = os.path.dirname(os.path.abspath(directory))
    try:
        descriptor, probe = tempfile.mkstemp(prefix=".sdjax-write-check-", dir=directory)
        os.close(descriptor)
        os.remove(probe)
    except OSError as err:
        return err.strerror or type(err).__name__
    return ""


def _write_json(path: str, data: dict) -> None:
    with open(path, "w") as f:
        json.dump(data, f, indent=2, allow_nan=True)
        f.write("\n")


def _save(fig, path: str) -> None:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=100)
    plt.close(fig)


def _stages(names: list[str], progress: bool):
    from tqdm.auto import tqdm

    return tqdm(total=len(names), desc="sdjax", disable=not progress, leave=False)


def _attitude_deg(quats: np.ndarray, quat0: np.ndarray) -> np.ndarray:
    """Rotation angle of each base attitude relative to ``quat0``, deg (quaternions x, y, z, w)."""
    from sdjax.rotation import quat_conjugate, quat_multiply

    import jax

    rel = np.asarray(jax.vmap(lambda q: quat_multiply(q, quat_conjugate(quat0)))(quats))
    return np.degrees(2.0 * np.arctan2(np.linalg.norm(rel[:, :3], axis=1), np.abs(rel[:, 3])))


# ------------------------------------------------------------------------------------------
# plan

PLANNERS = ("reactionless", "minimum_time", "straight_line", "optimize")


def plan_job(args: argparse.Namespace, load_model: Callable[[str], Any], max_steps: int) -> int:
    """``sdjax plan``: plan a point-to-point motion, execute it, write run, summary and plot."""
    import jax
    import jax.numpy as jnp

    import sdjax
    from sdjax.simulation import SimulationRun

    config = read_config(args.config, args.set or [])
    model = _model(config, load_model)
    n, dtype = model.num_joints, model.dtype
    problem_t = config.table("problem")
    if not model.num_end_points:
        raise problem_t.fail("end_point", f"the model {model.name} has no end points (a plan moves one to the target)")
    end_point = problem_t.integer("end_point", 0, minimum=0, maximum=model.num_end_points - 1)
    q0 = problem_t.vector("initial_q", np.zeros(n), size=n)
    duration = problem_t.number("duration", sign="positive")
    steps = problem_t.integer("steps", maximum=max_steps)
    control_points = problem_t.integer("control_points", 5, maximum=1000)
    position = problem_t.vector("target_position", None, size=3)
    offset = problem_t.vector("target_offset", None, size=3)
    if (position is None) == (offset is None):
        raise problem_t.fail(
            "target_position", "give exactly one of target_position (inertial, m) and target_offset (from the start, m)"
        )
    rotation = problem_t.matrix3("target_rotation", None)
    from sdjax._checks import rotation_defect

    # 1e-6: a rotation typed into a text file with six or seven digits
    defect = "" if rotation is None else rotation_defect(rotation, 1e-6)
    if defect:
        raise problem_t.fail("target_rotation", f"not a proper rotation matrix: {defect}")
    problem_t.done()
    limits = config.table("limits")
    lower = limits.vector("joint_lower", None, size=n)
    upper = limits.vector("joint_upper", None, size=n)
    if (lower is None) != (upper is None):
        raise limits.fail("joint_lower", "give both joint_lower and joint_upper, or neither")
    if lower is not None and not np.all(lower < upper):
        raise limits.fail("joint_upper", "every joint_upper must exceed its joint_lower")
    if lower is not None and not np.all((lower <= q0) & (q0 <= upper)):
        raise limits.fail("joint_lower", "problem.initial_q lies outside the joint limits")
    torque = limits.vector("torque", None, size=n, scalar=True, sign="positive")
    obstacles = limits.rows("obstacles", 4, None)
    if obstacles is not None and not np.all(obstacles[:, 3] > 0):
        raise limits.fail("obstacles", "every sphere's radius (its 4th number) must be positive")
    link_radius = limits.vector("link_radius", np.zeros(n), size=n, scalar=True, sign="non-negative")
    if obstacles is None and limits.has("link_radius"):
        raise limits.fail("link_radius", "applies with obstacles only")
    limits.done()
    planner = config.table("planner")
    method = planner.string("method", choices=PLANNERS)
    iterations = planner.integer(
        "iterations", 30 if method in ("reactionless", "minimum_time") else 100, maximum=1_000_000
    )
    refine = planner.integer("refine_iterations", 6, minimum=0, maximum=1000)
    starts = planner.integer("starts", 3, maximum=1024)
    learning_rate = planner.number("learning_rate", 0.003, sign="positive")
    seed = planner.integer("seed", 0, minimum=0)
    meet_torque_limits = planner.boolean("meet_torque_limits", False)
    relative_tolerance = planner.number("relative_tolerance", 0.02, sign="positive")
    if method != "minimum_time" and planner.has("relative_tolerance"):
        raise planner.fail("relative_tolerance", "applies to method = 'minimum_time' only")
    if not relative_tolerance < 1:
        raise planner.fail("relative_tolerance", f"must be below 1, got {relative_tolerance!r}")
    if method != "reactionless" and planner.has("meet_torque_limits"):
        raise planner.fail("meet_torque_limits", "applies to method = 'reactionless' only")
    if meet_torque_limits and torque is None:
        raise planner.fail("meet_torque_limits", "needs torque limits ([limits] torque)")
    if method == "minimum_time" and torque is None:
        raise planner.fail("method", "'minimum_time' needs torque limits ([limits] torque)")
    if method != "optimize":
        for key in ("starts", "learning_rate", "seed"):
            if planner.has(key):
                raise planner.fail(key, "applies to method = 'optimize' only")
    if method == "optimize" and starts * steps > max_steps:
        raise planner.fail(
            "starts", f"starts x problem.steps = {starts * steps} exceeds the limit of {max_steps} steps"
        )
    planner.done()
    names = ["plan.npz", "summary.json", "plan.png"]
    directory, plots, _ = _outputs(config, args, names)
    config.done()

    state0 = sdjax.make_state(model, q=jnp.asarray(q0, dtype))
    start_point = np.asarray(sdjax.forward_kinematics(model, state0).end_point_position[end_point])
    target = position if position is not None else start_point + offset
    problem = sdjax.PlanningProblem(
        model, state0, jnp.asarray(target, dtype), None if rotation is None else jnp.asarray(rotation, dtype),
        duration=duration, num_steps=steps, num_coefficients=control_points, end_point=end_point,
        joint_limits=None if lower is None else (jnp.asarray(lower, dtype), jnp.asarray(upper, dtype)),
        torque_limit=None if torque is None else jnp.asarray(torque, dtype),
        obstacles=None if obstacles is None else jnp.asarray(obstacles, dtype),
        link_radius=jnp.asarray(link_radius, dtype),
    )  # fmt: skip
    timings: dict[str, float] = {}
    history: np.ndarray | None = None
    baseline = None
    stages = ["straight line", "optimize", "refine"] if method == "optimize" else [method]
    bar = _stages(stages, not args.no_progress)
    t0 = time.perf_counter()
    summary: dict[str, Any] = {"method": method}
    if method == "reactionless":
        bar.set_description("reactionless")
        plan = sdjax.reactionless_plan(problem, max_iterations=iterations, meet_torque_limits=meet_torque_limits)
        evaluation = jax.block_until_ready(plan.evaluation)
        duration = float(plan.trajectory.duration)  # re-timed with meet_torque_limits
        history = np.asarray(plan.residual_history)
        summary.update(iterations=int(plan.iterations), converged=bool(plan.converged))
        timings["reactionless_s"] = time.perf_counter() - t0
        bar.update()
    elif method == "minimum_time":
        bar.set_description("minimum time")
        search = sdjax.minimum_time_plan(problem, max_iterations=iterations, relative_tolerance=relative_tolerance)
        evaluation = jax.block_until_ready(search.plan.evaluation)
        duration = float(search.duration)
        history = np.asarray(search.plan.residual_history)
        summary.update(
            iterations=int(search.plan.iterations),
            converged=bool(search.plan.converged),
            durations_tried=np.asarray(search.durations).tolist(),
            feasible=np.asarray(search.feasible).tolist(),
        )
        timings["minimum_time_s"] = time.perf_counter() - t0
        bar.update()
    else:
        bar.set_description("straight line")
        line = sdjax.straight_line_plan(problem, refine_iterations=refine)
        evaluation = jax.block_until_ready(line.evaluation)
        timings["straight_line_s"] = time.perf_counter() - t0
        summary["iterations"] = int(np.sum(np.isfinite(np.asarray(line.residual_history)))) - 1  # steps taken
        bar.update()
        if method == "optimize":
            baseline = evaluation
            bar.set_description("optimize")
            t1 = time.perf_counter()
            guesses = sdjax.initial_coefficients(problem, line.goal, starts, spread=0.05, seed=seed)
            result = sdjax.optimize_plan(problem, guesses, iterations=iterations, learning_rate=learning_rate)
            jax.block_until_ready(result.final_loss)
            history = np.asarray(result.loss_history)
            timings["optimize_s"] = time.perf_counter() - t1
            bar.update()
            bar.set_description("refine")
            t1 = time.perf_counter()
            if refine:
                _, evaluation = sdjax.refine_plan(problem, result.trajectory.coefficients, max_iterations=refine)
            else:
                evaluation = result.evaluation
            jax.block_until_ready(evaluation.loss)
            timings["refine_s"] = time.perf_counter() - t1
            summary.update(iterations=iterations, starts=starts, best_start=int(result.best))
            bar.update()
    bar.close()
    timings["total_s"] = time.perf_counter() - t0

    peak = np.asarray(evaluation.peak_torque)  # (between the step times too: PlanEvaluation)
    ratio = float(np.max(peak / torque)) if torque is not None else None
    summary.update(
        model=model.name, end_point=end_point, target_position=np.asarray(target).tolist(),
        start_position=start_point.tolist(), final_position=np.asarray(evaluation.end_point_position).tolist(),
        position_error_m=float(evaluation.position_error),
        orientation_error_rad=float(evaluation.orientation_error) if rotation is not None else None,
        base_attitude_change_deg=float(np.degrees(float(evaluation.base_attitude_change))),
        peak_torque=float(np.max(peak)), torque_ratio=ratio,
        joint_violation=float(evaluation.joint_violation), obstacle_violation_m=float(evaluation.obstacle_violation),
        duration=duration, num_steps=steps, timings=timings,
    )  # fmt: skip
    if baseline is not None:
        summary["straight_line"] = {
            "position_error_m": float(baseline.position_error),
            "base_attitude_change_deg": float(np.degrees(float(baseline.base_attitude_change))),
            "peak_torque": float(jnp.max(baseline.peak_torque)),
        }
    os.makedirs(directory, exist_ok=True)
    info = {
        "controller": f"computed-torque plan ({method})", "dt": duration / steps, "duration": duration,
        "num_steps": steps, "integrator": "rk4", "initial_q": q0.tolist(), "wall_s": timings["total_s"],
        "sdjax_version": sdjax.__version__, "command": ["sdjax", *args.argv],
    }  # fmt: skip
    paths = [os.path.join(directory, "plan.npz"), os.path.join(directory, "summary.json")]
    SimulationRun(model, evaluation.trajectory, info=info).save(paths[0])
    _write_json(paths[1], summary)
    if plots:
        paths.append(os.path.join(directory, "plan.png"))
        _save(_plan_figure(method, evaluation, baseline, history, torque, state0), paths[-1])
    print(
        f"planned {model.name} ({method}): end-point error {1e3 * summary['position_error_m']:.4g} mm, "
        f"base attitude change {summary['base_attitude_change_deg']:.4g} deg, peak |tau| {summary['peak_torque']:.4g}"
        + (f" (ratio to the limit {ratio:.3g})" if ratio is not None else "")
        + f", {timings['total_s']:.1f} s"
    )
    print("wrote\n" + "\n".join(f"  {p}" for p in paths))
    return 0


def _plan_figure(method, evaluation, baseline, history, torque, state0):
    import matplotlib.pyplot as plt

    t = np.asarray(evaluation.trajectory.time)
    n = evaluation.tau.shape[1]
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    ax = axes[0, 0]
    if history is None:
        ax.text(0.5, 0.5, "straight line: no iterations", ha="center", va="center", transform=ax.transAxes)
    elif history.ndim == 1:
        ax.semilogy(history[np.isfinite(history)], "o-")
        ax.set(xlabel="Gauss-Newton step", ylabel="largest residual [m | rad]", title="reactionless solve")
    else:
        for b in range(history.shape[0]):
            ax.semilogy(history[b], label=f"start {b}")
        ax.axhline(float(baseline.loss), color="k", ls=":", label="straight line")
        ax.set(xlabel="iteration", ylabel="loss", title="loss history")
        ax.legend()
    colors = plt.cm.tab10(np.arange(n) % 10)
    ax = axes[0, 1]
    for i in range(n):
        ax.plot(t, np.asarray(evaluation.trajectory.states.q[:, i]), color=colors[i], label=f"q{i + 1}")
        if baseline is not None:
            ax.plot(t, np.asarray(baseline.trajectory.states.q[:, i]), color=colors[i], ls="--")
    ax.set(xlabel="t [s]", ylabel="q [rad | m]", title=f"joint trajectories ({method}; dashed straight line)")
    ax.legend(ncol=4, fontsize=8)
    ax = axes[1, 0]
    quat0 = state0.base_quaternion
    if baseline is not None:
        ax.plot(t, _attitude_deg(baseline.trajectory.states.base_quaternion, quat0), "k--", label="straight line")
    ax.plot(t, _attitude_deg(evaluation.trajectory.states.base_quaternion, quat0), "C3", label=method)
    ax.set(xlabel="t [s]", ylabel="base rotation angle [deg]", title="base attitude change")
    ax.legend()
    ax = axes[1, 1]
    for i in range(n):
        ax.step(t[:-1], np.asarray(evaluation.tau[:, i]), where="post", color=colors[i])
        if baseline is not None:
            ax.step(t[:-1], np.asarray(baseline.tau[:, i]), where="post", color=colors[i], ls="--", alpha=0.5)
    if torque is not None:
        for sign in (1, -1):
            ax.step(t[[0, -1]], sign * np.full(2, np.max(torque)), color="k", lw=1)
    ax.set(xlabel="t [s]", ylabel="tau [N m | N]", title="joint torques vs limits")
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------------
# identify


def identify_job(args: argparse.Namespace, load_model: Callable[[str], Any], max_steps: int) -> int:
    """``sdjax identify``: simulate an excitation of the model with a known payload, identify
    the unknown bodies from the (noisy) record, write estimates, report and plots."""
    import jax
    import jax.numpy as jnp

    import sdjax
    from sdjax import excitation
    from sdjax import identification as ident

    config = read_config(args.config, args.set or [])
    model = _model(config, load_model)
    n = model.num_joints
    unknowns_t = config.table("unknowns")
    links = unknowns_t.vector("links", np.zeros(0))
    if links.size and not np.all((links == np.round(links)) & (links >= 1) & (links <= n)):
        raise unknowns_t.fail("links", f"expected link numbers 1..{n}")
    payload_link = unknowns_t.integer("payload_link", None, minimum=1, maximum=n)
    unknowns_t.done()
    links_tuple = tuple(int(k) for k in links)
    if payload_link is None and not links_tuple:
        raise unknowns_t.fail("payload_link", "nothing to identify: give unknowns.payload_link and/or unknowns.links")
    if payload_link in links_tuple:
        raise unknowns_t.fail("payload_link", "a link cannot be unknown and carry the unknown payload")
    data_t = config.table("data")
    record = data_t.string("file", None)
    if record is not None and not os.path.isabs(record):
        record = os.path.join(os.path.dirname(os.path.abspath(config.path)), record)
    data_t.done()
    measured = record is not None
    if measured:  # a measured record: nothing is simulated
        for table in ("excitation", "noise"):
            if config.has(table):
                raise config.fail(table, "applies to simulated data only (data.file gives a measured record)")
    payload_t = config.table("payload")
    truth_payload = None
    if measured and links_tuple and payload_t.has("mass"):
        raise payload_t.fail("mass", "a measured record's truth can be given for a payload alone (no unknowns.links)")
    if payload_link is not None and (not measured or payload_t.has("mass")):
        mass = payload_t.number("mass", sign="positive")
        centroid = payload_t.vector("centroid", size=3)
        inertia = payload_t.matrix3("inertia")
        truth_payload = (mass, centroid, inertia)
    payload_t.done()
    ex = config.table("excitation")
    duration = ex.number("duration", sign="positive") if not measured else 0.0
    dt = ex.number("dt", 0.005, sign="positive")
    steps = 0
    if not measured:
        try:
            steps = duration_steps(duration, dt, max_steps, f"{ex.prefix}duration", f"{ex.prefix}dt")
        except ValueError as err:
            raise ConfigError(f"{config.path}: {err}") from None
    every = ex.integer("sample_every", 4, maximum=max(steps, 1))
    q0 = ex.vector("initial_q", np.zeros(n), size=n)
    kind = ex.string("kind", "sinusoidal", choices=("sinusoidal", "optimal"))
    if kind == "sinusoidal":
        amplitude = ex.number("amplitude", 0.2, sign="positive")
        frequency = ex.vector("frequency", np.array([1.0, 3.0]), size=2, sign="positive")
        if not frequency[0] <= frequency[1]:
            raise ex.fail("frequency", "expected [lowest, highest] rad/s")
    else:  # sdjax.excitation.optimal_excitation's design options
        design_options = dict(
            criterion=ex.string("criterion", "trace", choices=excitation.CRITERIA),
            harmonics=ex.integer("harmonics", 4, maximum=50),
            max_iterations=ex.integer("iterations", 60, maximum=10_000),
            max_excursion=ex.vector("max_excursion", np.full(n, 0.3), size=n, scalar=True, sign="positive"),
            rate_limit=ex.vector("rate_limit", np.full(n, 1.0), size=n, scalar=True, sign="positive"),
            torque_limit=ex.vector("torque_limit", None, size=n, scalar=True, sign="positive"),
        )
    bandwidth = ex.number("bandwidth", 5.0, sign="positive")
    damping = ex.number("damping_ratio", 0.7, sign="positive")
    twist = ex.vector("base_twist", np.array([0.02, -0.01, 0.01, 0.01, 0.02, -0.015]), size=6)
    ex_seed = ex.integer("seed", 0, minimum=0)
    ex.done()
    noise_t = config.table("noise")
    level = noise_t.number("level", 0.0, sign="non-negative", maximum=1.0)
    noise_seed = noise_t.integer("seed", 0, minimum=0)
    noise_t.done()
    solver = config.table("identification")
    residual = solver.string("residual", "momentum", choices=("momentum", "dynamics", "both"))
    num_steps = solver.integer("steps", 50, minimum=0, maximum=100_000)
    solver.done()
    names = ["estimates.json", "identifiability.txt", "excitation.png", "convergence.png", "singular_values.png"]
    directory, plots, _ = _outputs(config, args, names)
    config.done()

    bar = _stages(["read" if measured else "simulate", "identify"], not args.no_progress)
    t0 = time.perf_counter()
    bar.set_description("read" if measured else "simulate")
    unknowns = sdjax.Unknowns(links=links_tuple, payload_link=payload_link)
    plant = model
    truth_parts = []
    # The truth of a simulated record (or of a measured one whose payload is known): the model's
    # links, and the payload; a measured record without a known payload has no truth.
    if links_tuple and not measured:
        truth_parts.append(ident.link_parameters(model, links_tuple))
    if truth_payload is not None:
        payload = sdjax.payload_parameters(*truth_payload)
        plant = sdjax.attach_payload(model, payload_link, payload)
        truth_parts.append(payload)
    truth = None
    if truth_parts:
        truth = jax.tree.map(lambda *xs: jnp.concatenate(xs), *truth_parts) if len(truth_parts) > 1 else truth_parts[0]
    if measured:
        assert record is not None
        data = ident.Dataset.load(record, num_joints=n)
        duration = float(data.time[-1] - data.time[0])
    elif kind == "sinusoidal":
        clean = ident.sinusoidal_excitation(
            plant, q0, duration, dt, amplitude=amplitude, frequency=frequency, bandwidth=bandwidth,
            damping_ratio=damping, base_twist=twist, seed=ex_seed,
        ).subsample(every)  # fmt: skip
    else:  # designed on the nominal model (the unknowns unknown), run on the plant
        tracking = dict(bandwidth=bandwidth, damping_ratio=damping, base_twist=twist)
        design = excitation.optimal_excitation(
            model, unknowns, q0, duration, dt, residual=residual, sample_every=every, seed=ex_seed,
            **design_options, **tracking,
        )  # fmt: skip
        clean = ident.tracking_record(plant, q0, design.reference, duration, dt, **tracking).subsample(every)
    if not measured:
        data = ident.add_noise(clean, level, noise_seed) if level > 0 else clean
    t_sim = time.perf_counter() - t0
    bar.update()
    bar.set_description("identify")
    result = sdjax.identify(model, data, unknowns, residual=residual, max_iterations=num_steps, truth=truth)
    t_id = time.perf_counter() - t0 - t_sim
    bar.update()
    bar.close()

    est = result.parameters
    bodies = []
    for b, label in enumerate(result.body_names):
        row = {
            "body": label,
            "mass": float(est.mass[b]),
            "centroid": np.asarray(est.centroid[b]).tolist(),
            "centroidal_inertia": np.asarray(est.centroidal_inertia[b]).tolist(),
        }
        if truth is not None:
            row["true_mass"] = float(truth.mass[b])
            row["true_centroid"] = np.asarray(truth.centroid[b]).tolist()
            row["true_centroidal_inertia"] = np.asarray(truth.centroidal_inertia[b]).tolist()
            row["errors"] = {k: float(v[b]) for k, v in (result.errors or {}).items()}
        bodies.append(row)
    report = result.identifiability
    summary = {
        "model": model.name, "residual": residual, "record": record if measured else "simulated",
        "noise_level": None if measured else level, "noise_seed": None if measured else noise_seed,
        "num_samples": int(data.num_samples), "record_s": duration, "bodies": bodies,
        "rank": int(report.rank), "num_parameters": len(report.parameter_names),
        "final_loss": float(result.loss_history[-1]), "steps": int(len(result.loss_history) - 1),
        "timings": {"read_s" if measured else "simulate_s": t_sim, "identify_s": t_id},
    }  # fmt: skip
    if not measured:
        summary["excitation"] = {"kind": kind}
    if not measured and kind == "optimal":
        summary["excitation"].update(
            criterion=design.criterion, iterations=design.iterations, scale=design.scale,
            limits_used_nominal_model=design.peaks,
            condition_number=design.condition_number, initial_condition_number=design.initial_condition_number,
        )  # fmt: skip
    if links_tuple:
        # The identifiable combinations of the link parameters (of the design's structural set,
        # or of this record), estimated and true: unique where the full vectors are not.
        base = (
            design.base
            if not measured and kind == "optimal"
            else ident.base_parameters(model, data, unknowns, residual=residual)
        )
        estimated = base.values(est)
        true = base.values(truth) if truth is not None else None
        summary["base_parameters"] = [
            {"combination": label, "estimate": float(estimated[i])}
            | ({"truth": float(true[i])} if true is not None else {})
            for i, label in enumerate(base.labels())
        ]
    os.makedirs(directory, exist_ok=True)
    paths = [os.path.join(directory, name) for name in names[:2]]
    _write_json(paths[0], summary)
    with open(paths[1], "w") as f:
        f.write(report.describe() + "\n")
    if plots:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(10, 3))
        ax[0].plot(data.time, data.states.q)
        ax[0].set(xlabel="t [s]", ylabel="q [rad]", title="joint angles")
        ax[1].plot(data.time, data.states.base_angular_velocity)
        ax[1].set(xlabel="t [s]", ylabel="w0 [rad/s]", title="base angular velocity")
        fig.tight_layout()
        paths.append(os.path.join(directory, names[2]))
        _save(fig, paths[-1])
        fig, ax = plt.subplots(figsize=(5, 3))
        ax.semilogy(np.maximum(np.asarray(result.loss_history), 1e-300), "o-")
        ax.set(
            xlabel="LM step",
            ylabel="loss 1/2 |r|^2",
            title="convergence (measured record)" if measured else f"convergence (noise {level:g})",
        )
        fig.tight_layout()
        paths.append(os.path.join(directory, names[3]))
        _save(fig, paths[-1])
        fig, ax = plt.subplots(figsize=(7, 4))
        s = np.asarray(report.singular_values) / float(report.singular_values[0])
        ax.semilogy(np.arange(1, s.size + 1), np.maximum(s, 1e-18), "o-", ms=3, label=f"rank {report.rank}")
        ax.axhline(report.tolerance, color="k", ls="--", lw=0.8, label="rank threshold")
        ax.set(xlabel="index", ylabel="normalised singular value", title=f"regressor SVD ({residual} residual)")
        ax.legend()
        fig.tight_layout()
        paths.append(os.path.join(directory, names[4]))
        _save(fig, paths[-1])
    for row in bodies:
        if "errors" in row:
            errors = ", ".join(f"{k} {v:.3g}" for k, v in row["errors"].items())
            print(f"{row['body']}: mass {row['mass']:.6g} kg (true {row['true_mass']:.6g}); errors: {errors}")
        else:
            print(f"{row['body']}: mass {row['mass']:.6g} kg")
    print(f"identifiability: rank {report.rank} of {len(report.parameter_names)} parameters")
    print("wrote\n" + "\n".join(f"  {p}" for p in paths))
    return 0


# ------------------------------------------------------------------------------------------
# montecarlo


def _brakes(table: _Table, n: int, steps: int) -> list[tuple[int, int]]:
    """``scenario.brakes``: ``[[joint, step], ...]``, joint brakes (1..n, distinct) engaging at
    the start of a step (0..steps - 1); none by default."""
    rows = table.rows("brakes", 2, None, allow_empty=True)
    if rows is None:
        return []
    out = []
    for i, (joint, step) in enumerate(rows):
        if not float(joint).is_integer() or not 1 <= joint <= n:
            raise table.fail(f"brakes[{i}][0]", f"expected a joint number 1..{n}, got {joint}")
        if not float(step).is_integer() or not 0 <= step < steps:
            raise table.fail(f"brakes[{i}][1]", f"expected a step 0..{steps - 1} (scenario.steps - 1), got {step}")
        out.append((int(joint), int(step)))
    joints = [joint for joint, _ in out]
    if len(set(joints)) != len(joints):
        raise table.fail("brakes", f"each joint takes one brake, got joints {joints}")
    return out


def montecarlo_job(args: argparse.Namespace, load_model: Callable[[str], Any], max_steps: int) -> int:
    """``sdjax montecarlo``: sample uncertain systems, simulate them under a joint controller,
    write the results file, the statistics (JSON and CSV) and the plots."""
    import jax.numpy as jnp

    import sdjax.montecarlo as mc

    config = read_config(args.config, args.set or [])
    model = _model(config, load_model)
    n = model.num_joints
    num_samples = config.integer("samples", maximum=MAX_SAMPLES)
    seed = config.integer("seed", 0, minimum=0)
    chunk = config.integer("chunk_size", min(num_samples, 1024), maximum=MAX_SAMPLES)
    sc = config.table("scenario")
    controller = sc.string("controller", "computed_torque", choices=("pd", "computed_torque"))
    q0 = sc.vector("initial_q", np.zeros(n), size=n)
    goal = sc.vector("q_goal", None, size=n)
    goal_offset = sc.vector("goal_offset", None, size=n)
    if (goal is None) == (goal_offset is None):
        raise sc.fail("q_goal", "give exactly one of q_goal and goal_offset (from initial_q)")
    q_goal = goal if goal is not None else q0 + goal_offset
    kp = sc.number("kp", sign="non-negative")
    kd = sc.number("kd", sign="non-negative")
    dt = sc.number("dt", sign="positive")
    steps = sc.integer("steps", maximum=max_steps)
    torque_limit = sc.number("torque_limit", None, sign="positive")
    brakes = _brakes(sc, n, steps)
    sc.done()
    if chunk * steps > max_steps:
        raise config.fail(
            "chunk_size",
            f"chunk_size x scenario.steps = {chunk * steps} exceeds the limit of {max_steps} steps held at once",
        )
    un = config.table("uncertainty")
    perturbations: dict[str, Any] = {}
    parameters: dict[str, Any] = {}
    sigma = un.number("link_mass_sigma", None, sign="non-negative")
    if sigma is not None:
        perturbations["mass"] = mc.Scale("link_mass", mc.LogNormal(1.0, sigma, shape=(n,)))
    scale = un.vector("link_inertia_scale", None, size=2, sign="positive")
    if scale is not None:
        if not scale[0] <= scale[1]:
            raise un.fail("link_inertia_scale", "expected [low, high] with low <= high")
        perturbations["inertia"] = mc.Scale("link_inertia", mc.Uniform(scale[0], scale[1], shape=(n,)))
    axes = un.number("inertia_axes_sigma", None, sign="non-negative")
    if axes is not None:
        perturbations["axes"] = mc.InertiaRotation("link_inertia", mc.Normal(0.0, axes, shape=(n, 3)))
    payload_link = un.integer("payload_link", None, minimum=1, maximum=n)
    payload_keys = ("payload_mass", "payload_offset", "payload_offset_sigma", "payload_gyration")
    if payload_link is not None:
        mass = un.vector("payload_mass", size=2, sign="non-negative")
        offset = un.vector("payload_offset", np.zeros(3), size=3)
        offset_sigma = un.number("payload_offset_sigma", 0.0, sign="non-negative")
        gyration = un.vector("payload_gyration", np.zeros(2), size=2, sign="non-negative")
        for key, pair in (("payload_mass", mass), ("payload_gyration", gyration)):
            if not pair[0] <= pair[1]:
                raise un.fail(key, "expected [low, high] with low <= high")
        perturbations["payload"] = mc.Payload(
            payload_link, mass=mc.Uniform(mass[0], mass[1]), offset=mc.Normal(offset, offset_sigma, shape=(3,)),
            radius_of_gyration=mc.Uniform(gyration[0], gyration[1]),
        )  # fmt: skip
    else:
        for key in payload_keys:
            if un.has(key):
                raise un.fail(key, "needs uncertainty.payload_link")
    q_sigma = un.number("initial_q_sigma", None, sign="non-negative")
    if q_sigma is not None:
        parameters["q0"] = mc.Normal(q0, q_sigma, shape=(n,))
    kp_range = un.vector("kp", None, size=2, sign="non-negative")
    if kp_range is not None:
        if not kp_range[0] <= kp_range[1]:
            raise un.fail("kp", "expected [low, high] with low <= high")
        parameters["kp"] = mc.Uniform(kp_range[0], kp_range[1], shape=(n,))
    kd_sigma = un.number("kd_sigma", None, sign="non-negative")
    if kd_sigma is not None:
        if not kd > 0:
            raise un.fail("kd_sigma", "a log-normal kd needs a positive scenario.kd")
        parameters["kd"] = mc.LogNormal(kd, kd_sigma, shape=(n,))
    torque_sigma = un.number("base_torque_sigma", None, sign="non-negative")
    if torque_sigma is not None:
        parameters["base_torque"] = mc.Normal(0.0, torque_sigma, shape=(3,))
    noise_sigma = un.number("tau_noise_sigma", None, sign="non-negative")
    if noise_sigma is not None:
        parameters["tau_noise"] = mc.Normal(0.0, noise_sigma, shape=(steps, n))
    un.done()
    metrics = mc.manoeuvre_metrics(q_goal)  # the notebook's four metrics
    requirements = _requirements(config.table("requirements"), tuple(metrics))
    names = ["results.npz", "summary.json", "summary.csv", "histograms.png", "sensitivity.png", "results.parquet"]
    directory, plots, parquet = _outputs(config, args, names, parquet=True)
    config.done()

    import sdjax

    state0 = sdjax.make_state(model, q=jnp.asarray(q0, model.dtype))
    uncertainty = mc.Uncertainty(model=perturbations, parameters=parameters)
    from sdjax.constraints import JointLock

    # Brake k engages at the start of its step and holds to the end (an impulse stops the joint).
    engaged = [np.arange(steps) >= step for _, step in brakes]
    scenario = mc.ControlScenario(
        model, q_goal=q_goal, kp=kp, kd=kd, dt=dt, num_steps=steps, initial_state=state0,
        controller=controller, torque_limit=torque_limit,
        constraints=[JointLock(joint) for joint, _ in brakes],
        active=np.stack(engaged, axis=1) if brakes else None,
    )  # fmt: skip
    res = mc.run_monte_carlo(
        model, uncertainty, scenario, metrics, num_samples=num_samples, seed=seed, chunk_size=chunk,
        progress=not args.no_progress, keep_draws=[k for k in _draw_names(uncertainty, model) if k != "param/tau_noise"],
    )  # fmt: skip
    os.makedirs(directory, exist_ok=True)
    paths = [os.path.join(directory, name) for name in names[:3]]
    res.save(paths[0])
    stats = res.summary()
    # Inputs ranked by rank correlation with each metric (a metric with under 4 finite samples: none)
    ranking = {
        name: [row._asdict() for row in res.sensitivity(name)] if np.sum(np.isfinite(values)) >= 4 else []
        for name, values in res.metrics.items()
    }
    met = _requirement_probabilities(res, requirements)
    _write_json(
        paths[1],
        {
            "num_samples": num_samples,
            "seed": seed,
            "statistics": stats,
            "sensitivity": ranking,
            "requirements": met,
            "info": _jsonable(res.info),
        },
    )
    columns = list(next(iter(stats.values())))
    with open(paths[2], "w") as f:
        f.write(",".join(["metric", *columns]) + "\n")
        for name, row in stats.items():
            f.write(",".join([name, *(repr(row[c]) for c in columns)]) + "\n")
    if parquet:
        paths.append(os.path.join(directory, names[5]))
        res.to_parquet(paths[-1], overwrite=True)  # an existing file was refused above without --force
    if plots:
        import matplotlib.pyplot as plt

        paths.append(os.path.join(directory, names[3]))
        _save(res.plot(bins=max(5, min(50, num_samples // 4))), paths[-1])
        pairs = [("model/payload/mass", None, "payload mass, kg", "attitude_error_deg", "final base attitude error, deg"),
                 ("param/kp", 0, "kp of joint 1, 1/s^2", "peak_joint_torque", "peak joint torque, N m")]  # fmt: skip
        pairs = [p for p in pairs if p[0] in res.draws]
        if pairs:
            fig, axs = plt.subplots(1, len(pairs), figsize=(4.5 * len(pairs), 3.2), squeeze=False)
            for ax, (key, column, xlabel, metric, ylabel) in zip(axs.flat, pairs):
                x = res.draws[key] if column is None else res.draws[key][:, column]
                ax.scatter(x, res.metrics[metric], s=3, alpha=0.5)
                ax.set(xlabel=xlabel, ylabel=ylabel)
            fig.tight_layout()
            paths.append(os.path.join(directory, names[4]))
            _save(fig, paths[-1])
    print(res.summary_table())
    for name, rows in ranking.items():
        shown = ", ".join(f"{row['input']} {row['rank_correlation']:+.2f}" for row in rows[:3])
        print(f"{name}: most sensitive to {shown}" if rows else f"{name}: no recorded draws to rank")
    for name, row in met.items():
        level = f"{100 * row['confidence']:g} %"
        what = "all requirements" if name == "all" else f"{name} < {row['below']:g}"
        print(f"P({what}) = {row['probability']:.4f}, {level} interval [{row['low']:.4f}, {row['high']:.4f}]")
    print("wrote\n" + "\n".join(f"  {p}" for p in paths))
    return 0


def _requirements(table: _Table, metrics: tuple[str, ...]) -> tuple[dict[str, float], float]:
    """``[requirements]``: ``metric = bound`` (the requirement ``metric < bound``) for any of the
    job's ``metrics``, and ``confidence`` (0.95) of the intervals."""
    for key in table.data:
        if key not in metrics and key != "confidence":
            raise table.fail(key, f"unknown key (expected a metric: {', '.join(metrics)}; or confidence)")
    confidence = table.number("confidence", 0.95, sign="positive")
    if not confidence < 1:
        raise table.fail("confidence", f"expected a level in (0, 1), got {confidence}")
    return {name: table.number(name) for name in metrics if table.has(name)}, confidence


def _requirement_probabilities(res: Any, requirements: tuple[dict[str, float], float]) -> dict[str, Any]:
    """Per requirement and for all at once: the probability it holds, with its interval."""
    bounds, confidence = requirements
    rows: dict[str, tuple[tuple[float, float, float], float | None]] = {
        name: (res.probability(name, below=bound, confidence=confidence), bound) for name, bound in bounds.items()
    }
    if len(bounds) > 1:
        rows["all"] = (res.requirements_met(bounds, confidence=confidence), None)
    return {
        name: {"below": bound, "probability": p, "low": low, "high": high, "confidence": confidence}
        for name, ((p, low, high), bound) in rows.items()
    }


def _draw_names(uncertainty, model) -> list[str]:
    import jax

    _, _, draws = uncertainty.sample(model, jax.random.key(0), 0)
    return sorted(draws)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


#: The jobs: command name -> (function, help line).
JOBS: dict[str, tuple[Callable[..., int], str]] = {
    "plan": (plan_job, "plan a point-to-point motion of a free-floating arm (TOML config)"),
    "identify": (identify_job, "identify unknown inertial parameters from a simulated excitation (TOML config)"),
    "montecarlo": (montecarlo_job, "Monte-Carlo of uncertain systems under a joint controller (TOML config)"),
}
