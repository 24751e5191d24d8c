"""Shared helpers of the benchmark scripts: timing, machine description, result files.

Timing follows ``timeit``: each measurement is repeated and the *minimum* is reported (the
machine's other load only ever adds time); the median is kept too. Outputs are waited for
with ``jax.block_until_ready`` on the results, never on the function.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def configure(float64: bool = True) -> None:
    """Select the precision for this process (benchmarks are applications: they may)."""
    jax.config.update("jax_enable_x64", bool(float64))


def machine() -> dict[str, Any]:
    """Machine, software versions and date, recorded with every result file."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import sdjax

    info = {
        "date": datetime.date.today().isoformat(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "sdjax": sdjax.__version__,
        "devices": [str(d) for d in jax.devices()],
        "backend": jax.default_backend(),
    }
    if info["backend"] != "cpu":
        info["gpu"] = jax.devices()[0].device_kind
    for package in ("pinocchio", "mujoco", "mujoco.mjx"):
        try:
            module = __import__(package, fromlist=["__version__"])
            info[package] = getattr(module, "__version__", "installed")
        except Exception:  # noqa: BLE001 - optional peers
            info[package] = None
    return info


def time_call(fn: Callable[[], Any], *, repeats: int = 5, min_seconds: float = 0.2) -> dict[str, float]:
    """Seconds per call of ``fn`` (already compiled): min and median over ``repeats`` runs of
    enough calls to last ``min_seconds``."""
    jax.block_until_ready(fn())
    calls, elapsed = 1, 0.0
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            out = fn()
        jax.block_until_ready(out)
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds or calls >= 1 << 20:
            break
        calls *= 2
    samples = [elapsed / calls]
    for _ in range(repeats - 1):
        start = time.perf_counter()
        for _ in range(calls):
            out = fn()
        jax.block_until_ready(out)
        samples.append((time.perf_counter() - start) / calls)
    return {"min": min(samples), "median": statistics.median(samples), "calls": calls}


def time_python_loop(fn: Callable[[int], Any], count: int, *, repeats: int = 5) -> dict[str, float]:
    """Seconds per item of a plain Python loop ``for k in range(count): fn(k)``."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for k in range(count):
            fn(k)
        samples.append((time.perf_counter() - start) / count)
    return {"min": min(samples), "median": statistics.median(samples), "calls": count}


def compile_seconds(jitted: Callable, *args: Any) -> tuple[float, Any]:
    """Time of ``jitted.lower(*args).compile()`` (tracing and lowering included), and the
    compiled function."""
    start = time.perf_counter()
    compiled = jitted.lower(*args).compile()
    return time.perf_counter() - start, compiled


def batch_of(tree_fn: Callable[[int], Any], size: int, distinct: int = 64) -> Any:
    """Stack ``size`` pytrees ``tree_fn(k % distinct)`` along a new leading axis."""
    base = [tree_fn(k) for k in range(min(size, distinct))]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *base)
    return jax.tree.map(lambda x: jnp.resize(x, (size,) + x.shape[1:]), stacked)


def write_result(name: str, payload: dict[str, Any]) -> pathlib.Path:
    """Write ``benchmarks/results/<name>.json`` with the machine description."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    data = {"benchmark": name, "machine": machine(), **payload}
    path.write_text(json.dumps(data, indent=1, default=_json_default) + "\n")
    return path


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """A markdown table."""

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
