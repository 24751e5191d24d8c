"""Test configuration: float64, strict dtype promotion, shared fixtures.

The library never changes JAX's configuration; the test suite does, so that oracles can
be compared to round-off (float32 behaviour is tested explicitly in test_float32.py).
"""

import gc
import getpass
import os
import pathlib
import tempfile

# Compile faster (set before JAX starts its CPU backend; inherited by subprocesses): XLA's
# older loop emitters compile this suite's many small fused kernels ~30 % faster than the
# default MLIR fusion emitters, at the same run time (measured on the 7-joint arm and a 30-link
# tree, batch 1024: 2-core CPU, jaxlib 0.10.2). Results agree to round-off, which is all the
# tests assume.
# LLVM's optimisation level 0 for the generated code (--xla_backend_optimization_level=0): XLA's
# own graph optimisations and fusion still run, LLVM's passes over the kernels do not. Two
# compile-bound tests (a gradient through a constrained rollout, a batched multi-start plan):
# 176 s -> 119 s; the whole default run 1559 s -> 1170 s (cold compilation cache, 2-core CPU,
# jaxlib 0.10.2). Results agree to round-off; three tests that compared differently compiled
# programs bitwise now allow a few ulp. Set SDJAX_TEST_XLA_OPT=default to compile as users do
# (the benchmarks always do).
# XLA's fast-compile preset (--xla_cpu_opt_preset=CPU_OPT_PRESET_FAST_COMPILE: fewer and cheaper
# HLO passes) on top: the gradient through a constrained rollout and the capture of two systems,
# compiled afresh, 126 s -> 93 s (2-core CPU, jaxlib 0.10.2); again round-off only.
# LLVM code generation in one piece (--xla_cpu_parallel_codegen_split_count=1): XLA splits each
# program's LLVM module into parts compiled on a thread pool, which on this suite's 2-core runs
# (both cores already busy with one xdist worker each) costs more than it overlaps. Twelve
# representative programs (forward and inverse dynamics, H, a 20-step rollout and its gradient,
# a batched forward dynamics; two models) compiled in 4.4-5.0 s against 5.7-5.8 s (three
# interleaved runs); four test modules (identities, gjm, control, constraints; -n 2, cold cache)
# in 157 s against 166 s and 198 s against 205 s, two paired runs (the machine's speed drifted
# between the pairs). The same kernels, generated in one LLVM module; the tests pass unchanged.
_COMPILE_FAST = ["--xla_cpu_use_fusion_emitters=false", "--xla_cpu_parallel_codegen_split_count=1"]
if os.environ.get("SDJAX_TEST_XLA_OPT", "fast") != "default":
    _COMPILE_FAST += ["--xla_backend_optimization_level=0", "--xla_cpu_opt_preset=CPU_OPT_PRESET_FAST_COMPILE"]
for _flag in _COMPILE_FAST:
    if _flag.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()

# jemalloc for the xdist workers: XLA's compiler spends ~15 % of its time in glibc's malloc and free
# (perf, test_planning.py and test_gjm.py: _int_malloc, unlink_chunk, malloc_consolidate, free), and
# compiling is most of this suite's time. Eight test files (201 tests, -n 2, cold caches, 2-core CPU,
# alternated in one sitting): 134 s and 150 s with glibc's allocator, 129 s and 134 s with tcmalloc,
# 118 s and 120 s with jemalloc (peak memory per worker 4.2 GB with each). The library (a file
# found in the usual places, `ldconfig`'s list otherwise) is preloaded into the workers only: the
# controller sets LD_PRELOAD before it starts them (pytest_configure below), and each worker takes
# it out of its own environment again at once, so that what the tests start (CLI subprocesses,
# Chromium) runs with the system's allocator. SDJAX_TEST_MALLOC=system keeps glibc's; a path picks
# another library. Without -n (no workers) nothing changes. Whole default runs (cold caches, 2-core
# CPU, one sitting, in this order): 1020 s with glibc's allocator, 875 s with jemalloc, 959 s with
# glibc's again (user CPU 1889 s, 1586 s, 1765 s).
_MALLOC_ENV = "SDJAX_TEST_MALLOC"
_PRELOADED = "SDJAX_TEST_PRELOADED"  # (what the controller added, for the workers to take out)


def _jemalloc() -> str | None:
    """The jemalloc shared library's path, or None where it is not installed."""
    import ctypes.util
    import glob

    for pattern in ("/usr/lib/*-linux-gnu/libjemalloc.so.2", "/usr/lib64/libjemalloc.so.2", "/usr/lib/libjemalloc.so.2",
                    "/usr/local/lib/libjemalloc.so.2"):  # fmt: skip
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return ctypes.util.find_library("jemalloc")  # (a name the dynamic loader resolves)


if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get(_PRELOADED):  # (a worker: out again)
    _entries = [e for e in os.environ.get("LD_PRELOAD", "").split(":") if e and e != os.environ[_PRELOADED]]
    if _entries:
        os.environ["LD_PRELOAD"] = ":".join(_entries)
    else:
        os.environ.pop("LD_PRELOAD", None)
    del os.environ[_PRELOADED]

import jax  # noqa: E402 (after XLA_FLAGS)
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")

# Python's cyclic garbage collector less often: tracing allocates millions of short-lived objects,
# and with the default thresholds (700, 10, 10) the collector's full passes over the live heap
# (JAX's caches of traced and compiled programs) cost 6-7 s per xdist worker in 150 s of tests.
# Measured with gc.callbacks on eight test files (287 tests, -n 2, cold caches, 2-core CPU):
# collector pauses 7.2 s and 8.2 s per worker by default, 1.1 s and 0.8 s with these thresholds
# (a young collection every 50,000 allocations, no full pass in that span); the largest worker's
# peak memory 4.03 -> 4.18 GB. Cycles that reach the oldest generation wait for its rare full
# pass: whole default runs peaked at 6.8-6.9 GB in one worker against 6.6 GB by default (24 GB
# machine). Wall clock does not resolve a change of this size on this machine, whose speed
# drifts by up to 30 % between identical runs: the eight files 151 s by default against 154 s;
# whole default runs, in the order they ran (the machine slowing through the sitting), 827 and
# 849 s by default, 881 and 876 s with these thresholds, 902 s by default, 922 s with them.
gc.set_threshold(50_000, 50, 1000)

# One on-disk cache of compiled XLA programs for the whole run, shared by the xdist workers and
# inherited (through the environment) by the notebook kernels and CLI subprocesses: the suite
# compiles the same functions in many modules, and compiling, not running, is most of its time.
# Entries are keyed by the program, the JAX version and the compiler flags, so a stale entry is
# never used; set SDJAX_TEST_JAX_CACHE=off to compile everything afresh.
_CACHE = os.environ.get("SDJAX_TEST_JAX_CACHE") or str(
    pathlib.Path(tempfile.gettempdir()) / f"sdjax-test-jax-cache-{getpass.getuser()}"
)
if _CACHE != "off":
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", _CACHE)
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
    jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
    jax.config.update(
        "jax_persistent_cache_min_compile_time_secs", float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"])
    )
    jax.config.update(
        "jax_persistent_cache_min_entry_size_bytes", int(os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"])
    )


@pytest.fixture(scope="session")
def sample_model():
    from sdjax.models import spacedyn_sample

    return spacedyn_sample()


@pytest.fixture(scope="session")
def arm7_model():
    from sdjax.models import free_flying_arm_7dof

    return free_flying_arm_7dof()


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_code():
    """Drop JAX's compilation caches after a test module once the process holds many mappings
    (:func:`helpers.release_compiled_code`).

    Clearing after every module instead made later modules trace and compile again what earlier
    ones had (the same models and functions): six modules (206 tests) took 178 s that way and
    161 s with the threshold, the same sitting (cold caches, 2-core CPU, jaxlib 0.10.2); whole
    default runs, whose spread on that machine is about +-100 s, 1156-1299 s against 1302-1464 s.
    """
    yield
    from helpers import release_compiled_code

    release_compiled_code()


def pytest_configure(config):
    """Under pytest-xdist, the controller preloads jemalloc into the workers it is about to start
    (see ``_MALLOC_ENV`` above); the workers are started after this hook."""
    if os.environ.get("PYTEST_XDIST_WORKER") or not getattr(config.option, "numprocesses", None):
        return
    choice = os.environ.get(_MALLOC_ENV, "jemalloc")
    if choice == "system":
        return
    library = _jemalloc() if choice == "jemalloc" else choice
    if library is None:
        return
    if choice != "jemalloc" and not os.path.exists(library):
        raise pytest.UsageError(
            f"{_MALLOC_ENV}={choice}: no such file (a shared library's path, 'jemalloc' or 'system')"
        )
    preloaded = [entry for entry in os.environ.get("LD_PRELOAD", "").split(":") if entry]
    if library in preloaded:  # (preloaded before the run: left as it was, for everything)
        return
    os.environ[_PRELOADED] = library
    os.environ["LD_PRELOAD"] = ":".join([library, *preloaded])


def pytest_collection_modifyitems(config, items):
    """Run the notebook executions first: they are among the longest tests (5-60 s each in quick mode), and under
    pytest-xdist a long test scheduled last leaves the other workers idle while it finishes."""
    items.sort(key=lambda item: 0 if item.nodeid.startswith("tests/test_notebooks.py::test_notebook_runs") else 1)
